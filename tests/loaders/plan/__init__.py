"""The epoch plan (loaders/plan/): pure property and value tests, mixtures, repeats, resume, scale."""
