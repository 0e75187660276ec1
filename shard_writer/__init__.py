"""Packing: image folders and listings -> WebDataset tar shards + ``index.json``; reshard,
split, verify, index files (of our data sets and of someone else's shards) and sample data, on
the same write -> publish path (manifest last).

>>> from shard_writer import PackOptions, pack
>>> summary = pack("data/images", "data/shards", PackOptions(max_count=1000))

Every command of the CLI that writes or checks a data set is one call here; optional
dependencies (pyarrow for parquet listings, Ray for ``engine="ray"``) load only when used.
"""

from shard_writer.foreign_index import write_foreign_index
from shard_writer.index import write_dali_indexes
from shard_writer.index_folder import IndexOptions, write_index_folder
from shard_writer.options import PackOptions, PackSummary, ReshardOptions, WriteOptions
from shard_writer.pack import pack
from shard_writer.parquet_check import DamagedRowGroups, inspect_parquet, verify_parquet
from shard_writer.reshard import reshard
from shard_writer.sample_data import SampleDataSummary, generate_sample_data
from shard_writer.sample_videos import VideoSettings, generate_sample_videos
from shard_writer.split import parse_fractions, split
from shard_writer.timm_index import write_timm_info
from shard_writer.verify import UnsafeMember, inspect_dataset, verify_dataset
from wdstool.base.errors import OnError

__all__ = [
    "DamagedRowGroups",
    "IndexOptions",
    "OnError",
    "PackOptions",
    "PackSummary",
    "ReshardOptions",
    "SampleDataSummary",
    "UnsafeMember",
    "VideoSettings",
    "WriteOptions",
    "generate_sample_data",
    "generate_sample_videos",
    "inspect_dataset",
    "inspect_parquet",
    "pack",
    "parse_fractions",
    "reshard",
    "split",
    "verify_dataset",
    "verify_parquet",
    "write_dali_indexes",
    "write_foreign_index",
    "write_index_folder",
    "write_timm_info",
]
