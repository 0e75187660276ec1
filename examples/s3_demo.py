"""The S3 leg of `make demo`: pack to S3, stream it back, compare with the local shards.

    python examples/s3_demo.py IMAGES LOCAL_SHARDS [--bucket NAME]

Without AWS_ENDPOINT_URL in the environment it starts a local S3 server (moto, 127.0.0.1, a
free port) and stops it at the end; with it, it uses that endpoint and the usual AWS
credentials (the bucket is created when missing).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator

from loaders import make_loader
from wdstool.base.locals3 import LocalS3


@contextlib.contextmanager
def s3_endpoint() -> Iterator[str]:
    if os.environ.get("AWS_ENDPOINT_URL") or os.environ.get("AWS_ENDPOINT_URL_S3"):
        yield "the S3 endpoint from AWS_ENDPOINT_URL"
        return
    with LocalS3() as s3:
        os.environ.update(s3.env)
        yield f"a local S3 server at {s3.endpoint_url} (moto)"


def ensure_bucket(bucket: str) -> None:
    import botocore.exceptions

    from wdstool.base.s3 import s3_client

    client = s3_client()
    try:
        client.head_bucket(Bucket=bucket)
    except botocore.exceptions.ClientError:
        client.create_bucket(Bucket=bucket)


def one_epoch(source: str, workers: int) -> tuple[float, float, int]:
    loader = make_loader(source, 64, image_size=224, num_workers=workers, seed=0)
    started = time.perf_counter()
    n = 0
    for batch in loader:
        n += len(batch["labels"])
    seconds = time.perf_counter() - started
    return n / seconds, loader.bytes_read / seconds / 1e6, n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("images")
    parser.add_argument("local_shards")
    parser.add_argument("--bucket", default="wdstool-demo")
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    with s3_endpoint() as where:
        print(f"S3 leg: {where}")
        ensure_bucket(args.bucket)
        url = f"s3://{args.bucket}/demo"
        wdstool = [sys.executable, "-m", "wdstool"]
        subprocess.run(
            [*wdstool, "pack", args.images, url, "--max-count", "250", "--overwrite"], check=True
        )
        subprocess.run([*wdstool, "verify", url, "-q"], check=True)
        print(f"streaming one epoch each ({args.workers} workers, batch 64, 224 px):")
        for name, source in (("local", args.local_shards), ("s3", url)):
            ips, mbs, n = one_epoch(source, args.workers)
            print(f"  {name:5s} {n} images  {ips:6.0f} images/s  {mbs:6.1f} MB/s   {source}")


if __name__ == "__main__":
    main()
