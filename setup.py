"""The compiled parts: wdstool/format/_jpegcrop.c (partial JPEG decode with libjpeg-turbo),
wdstool/format/_jpegtran.c (restart markers added losslessly, for that decoder),
wdstool/format/_mapread.c (guarded reads out of memory-mapped shards),
loaders/recipe/_pilresample.c (Pillow's resampling, bit for bit, vectorized) and
loaders/kinds/_planar.c (a batch's images from interleaved pixels into planes).

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
            depends=["wdstool/format/_jpegguard.h"],
            libraries=["jpeg"],
            extra_compile_args=["-O2"],
            optional=True,
        ),
        # restart markers added losslessly at pack time (the coefficient API), for the region
        # decode above; without it `pack --restart-markers` keeps the original bytes
        Extension(
            "wdstool.format._jpegtran",
            ["wdstool/format/_jpegtran.c"],
            depends=["wdstool/format/_jpegguard.h"],
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
        # Pillow's resize of the crop, bit for bit, for pipelines written for PIL images (timm's,
        # torchvision v1's): -O3 vectorizes its passes; no contraction of a*b+c into one rounding,
        # so the filter coefficients are Pillow's doubles exactly. Without it: Pillow's own resize
        Extension(
            "loaders.recipe._pilresample",
            ["loaders/recipe/_pilresample.c"],
            extra_compile_args=["-O3", "-ffp-contract=off"],
            optional=True,
        ),
        # a batch's images into their [3,h,w] planes from the decoder's interleaved pixels,
        # vectorized (8x torch's copy of a permuted view); without it: that copy
        Extension(
            "loaders.kinds._planar",
            ["loaders/kinds/_planar.c"],
            extra_compile_args=["-O3"],
            optional=True,
        ),
    ]
)
