"""stream-bench (loaders/bench/): its statistics by value and the command end to end."""
