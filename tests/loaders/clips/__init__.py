"""Video clips (loaders/clips/)."""
