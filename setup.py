"""The compiled replay hot path (cupygraph/backends/_replay.c) as an optional extension: where no C
compiler is found the install goes on and cupygraph replays through its Python path (slower per
call, same results); ``cupygraph.backends.cupy_fast.COMPILED`` says which one is in use."""

from setuptools import Extension, setup

SOURCES = ["cupygraph/backends/_replay.c", "cupygraph/backends/_replay_helpers.c",
           "cupygraph/backends/_replay_record.c"]

setup(ext_modules=[Extension("cupygraph.backends._replay", SOURCES, depends=["cupygraph/backends/_replay.h"],
                             optional=True)])
