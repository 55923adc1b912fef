"""The compiled replay hot path (cupygraph/backends/fastpath/_replay.c) as an optional extension: where no C
compiler is found the install goes on and cupygraph replays through its Python path (slower per
call, same results); ``cupygraph.backends.fastpath.compiled.COMPILED`` says which one is in use."""

from setuptools import Extension, setup

SOURCES = ["cupygraph/backends/fastpath/_replay.c", "cupygraph/backends/fastpath/_replay_counts.c",
           "cupygraph/backends/fastpath/_replay_helpers.c", "cupygraph/backends/fastpath/_replay_record.c",
           "cupygraph/backends/fastpath/_replay_record_type.c"]

setup(ext_modules=[Extension("cupygraph.backends.fastpath._replay", SOURCES,
                             depends=["cupygraph/backends/fastpath/_fastpath.h"], optional=True)])
