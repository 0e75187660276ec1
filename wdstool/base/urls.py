"""URLs of storage: local paths, ``file://``, ``s3://`` and other fsspec URLs."""

from __future__ import annotations

S3_SCHEMES = ("s3", "s3a")


def scheme_of(url: str) -> str:
    return url.split("://", 1)[0].lower() if "://" in url else "file"


def is_s3(url: str) -> bool:
    return scheme_of(url) in S3_SCHEMES


def is_remote(url: str) -> bool:
    """Anything but a local path or a file:// URL."""
    return "://" in url and not url.startswith("file://")


def local_path(url: str) -> str:
    """The path of a local path or file:// URL."""
    return url[len("file://") :] if url.startswith("file://") else url


def split_s3(url: str) -> tuple[str, str]:
    """("bucket", "key/of/object") for "s3://bucket/key/of/object"."""
    rest = url.split("://", 1)[1]
    bucket, _, key = rest.partition("/")
    return bucket, key
