"""The loader under training: torchrun jobs, Lightning, Accelerate, torchtnt, Composer, the Stateful
protocol. The *_job.py scripts are what these tests start (with torchrun or python)."""
