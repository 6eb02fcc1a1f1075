"""Extractive question answering, SQuAD v1.1 / v2.0, below the tasks and the hub that both use it:
the tasks layer trains and scores SQuAD (`tasks/squad.py`, `roberta evaluate squad`), the hub
answers questions (`Roberta.answer`). Only `predict.py` imports torch.

    examples = read_squad("dev-v2.0.json", "2.0")
    features = make_windows(tokenizer, examples, train=False)
    ... the model gives start/end logits per window ...
    decoded = decode(examples, features.windows, start_logits, end_logits, version="2.0")
    threshold, _ = choose_null_threshold(examples, decoded.best_spans, decoded.null_odds)
    answers = apply_null_threshold(decoded.best_spans, decoded.null_odds, threshold)
    write_predictions("predictions.json", answers)
    evaluate_squad("dev-v2.0.json", "predictions.json", "2.0")  # {"exact_match": .., "f1": .., ...}

examples.py  the official JSON read into `SquadExample`s
windows.py   `<s> question </s></s> context-window </s>` over each context, offsets back to characters
decode.py    n-best spans from start/end logits; v2.0's null odds and threshold
metric.py    the official metrics, the predictions and null-odds files (`evaluate_squad`)
predict.py   a fine-tuned model's decoded answers over windows (torch)
"""
