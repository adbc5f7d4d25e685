"""The explicit path: the probability matrix materialised, every hook run.

It runs every layer and every call (the chooser's last resort), returns the attention
weights, and is the reference every other path is tested against. Its softmax is taken
in float32 whatever the input dtype.
"""

import torch
import torch.nn.functional as F

from .base import HookPath


class Explicit(HookPath):
    name = "explicit"
    gives_weights = True

    def attend(self, q, k, v, scores, ctx, run):
        """``softmax(scale q k^T + bias, ~allowed)``, then ``post_softmax``, ``value_term`` and
        ``combine``; emptied rows zeroed before and after every ``post_softmax`` and, per
        head, before ``combine``. Returns (out (B, H, T, D), probabilities)."""
        logits = torch.matmul(q * run.scale, k.transpose(-1, -2))  # (B, H, T, S)
        if scores.bias is not None:
            logits = logits + scores.bias
        if scores.allowed is not None:
            logits = logits.masked_fill(~scores.allowed, float("-inf"))
        probs = scores.zero_empty(torch.softmax(logits, dim=-1, dtype=torch.float32))
        for p in run.pieces:  # a convolution over rows must not refill an emptied row
            probs = scores.zero_empty(p.post_softmax(probs, ctx))
        probs_q = probs.type_as(q)
        if run.dropout_p > 0:
            probs_q = F.dropout(probs_q, p=run.dropout_p, training=True)
        out = torch.matmul(probs_q, v)  # (B, H, T, D)
        for p in run.pieces:
            extra = p.value_term(probs_q, ctx)
            if extra is not None:
                out = out + extra
        out = scores.zero_empty(out)  # per head, before combine mixes heads
        for p in run.pieces:
            out = p.combine(probs_q, v, out, ctx)
        return out, probs
