"""Fine-tuning a pre-trained encoder, as in the BERT paper: sequence classification and
regression on the pooled `[CLS]` (GLUE, `classify`), token tagging (CoNLL NER, `tag`), span
extraction (SQuAD v1.1 and 2.0, `spans`), multiple choice (SWAG, `choose`); each reads its
task's own files or the Hugging Face Hub's (`hub`). Each kind implements `task.Task`; `loop`
trains any of them with pre-training's step, optimizer and logging (`model.training`);
`encoder` reads the pre-trained weights and puts the task's head on them.
"""
