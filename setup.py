"""The compiled parts: wdstool/format/_jpegcrop.c (partial JPEG decode with libjpeg-turbo) and
wdstool/format/_mapread.c (guarded reads out of memory-mapped shards).

It is optional: where no C compiler or libjpeg headers are found (Debian/Ubuntu:
``apt install libjpeg-dev``) the build goes on without it and the loaders decode whole images
(the same pixels, slower); ``wdstool stream-bench`` says which decoder ran.
Everything else about the package lives in pyproject.toml.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "wdstool.format._jpegcrop",
            ["wdstool/format/_jpegcrop.c"],
            libraries=["jpeg"],
            extra_compile_args=["-O2"],
            optional=True,
        ),
        # guarded reads out of memory-mapped local shards (SIGBUS -> OSError); without it the
        # loader reads member bytes with read() as before
        Extension(
            "wdstool.format._mapread",
            ["wdstool/format/_mapread.c"],
            extra_compile_args=["-O2"],
            optional=True,
        ),
    ]
)
