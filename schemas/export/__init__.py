"""Export a shard set to the formats other BERT trainers read: HDF5 (NVIDIA DeepLearningExamples'
PyTorch BERT), TFRecord (Google's run_pretraining.py) and MDS (MosaicML streaming).

`run.export` is the driver; `rows` pads rows to fixed widths; `hdf5`, `tfrecord` and `mds` write
one format each; `dest` is the one place DEST is touched. Neither Beam nor torch is needed.
"""
