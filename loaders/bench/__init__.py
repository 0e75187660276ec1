"""``wdstool stream-bench``'s library: run the loader, the baselines and the ceiling, and report.

``run`` interleaves and repeats the runs, ``measure`` times one, ``baselines`` builds the
pipelines we compare against, ``report`` renders the result as text and as a plot.
"""
