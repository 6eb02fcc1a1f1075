"""Token tagging (named entities, parts of speech), below both the task that trains it and the hub
that runs it: `encoding` turns pre-split words into sub-tokens with word-aligned labels and cuts
long sentences into overlapping windows, `metric` scores entities as CoNLL's conlleval does,
`predict` runs a tagging head over windows and groups a text's tokens into entities."""
