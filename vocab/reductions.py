"""How a metric combines over micro-batches and minibatches (an algorithm's `metrics=`, the catalogue's `reduction`):

    token_mean: a mean over valid tokens   -> sum of value x tokens, divided by the tokens
    seq_mean:   a mean over sequences      -> sum of value x sequences, divided by the sequences
    sum:        already scaled by the minibatch's denominators (the loss terms) -> parts add up
    min, max:   extremes
"""

TOKEN_MEAN, SEQ_MEAN, SUM, MIN, MAX = "token_mean", "seq_mean", "sum", "min", "max"
REDUCTIONS = (TOKEN_MEAN, SEQ_MEAN, SUM, MIN, MAX)
