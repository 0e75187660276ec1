"""The loader itself (loaders/loader.py, make.py, pool.py, threads.py, mixing.py, config.py):
end-to-end runs, buffer pool, decode threads, mixtures, settings, the order pin, flat memory."""
