"""Where samples come from (loaders/source.py, read.py, labels.py, schema.py): web servers,
memory-mapped shards, opening ahead, other shard formats, the label check, fields."""
