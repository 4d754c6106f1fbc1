"""Running a graph: the local runner with forked workers, Dask, others passed through to Beam
(`run`); refusing unknown flags (`options`); every part of Beam's internals these use, in one
table (`beam_internals`)."""
