"""The build's files: any filesystem (`fsio`: local, gs://, Beam's others) and the chunk files
that pass between stages (`chunks`)."""
