"""What the tests share, kept in one place (none of it is a test):

- ``tars``: tar members written with Python's tarfile (``add``, ``sample``, ``build_tar``) and
  ``Pipe``, a non-seekable stream;
- ``plans``: the plan's functions with flat keywords (``plan_kw``, ``resumed_kw``) and the
  batches a rank's plan delivers (``delivered``);
- ``torchrun``: torchrun jobs on 127.0.0.1 (``free_port``, ``torchrun_env``, ``train_ddp_cmd``,
  ``torchrun``);
- shards and files: ``tar_reference`` (other tools' shards), ``unsafe_shards``, ``videos``,
  ``jpegs``, ``dali_idx``, ``counting``, ``mutate``; ``interleaved`` (listings of documents:
  several images and texts a row);
- servers on 127.0.0.1: ``webserver``, ``countproxy``, ``faultproxy``;
- ``extras``: what the project's extras promise; ``mutation``: ``make mutants``.

The fixtures stay in the conftest.py files (``tests/conftest.py``, ``tests/loaders/conftest.py``).
"""
