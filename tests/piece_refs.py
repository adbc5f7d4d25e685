"""Plain float64 loop references and checks shared by the tests of the
temp / chained / dpi / convattn pieces (not a test module)."""

import math

import torch


def sentence_positions(kpm_row):
    """Position of every index within its sentence (pads get -1)."""
    out, n = [], 0
    for pad in kpm_row.tolist():
        out.append(-1 if pad else n)
        n += 0 if pad else 1
    return out


def loop_probs64(q, k, kpm=None, bias=None, causal=False):
    """softmax(q k^T / sqrt(d) + bias) over real keys, written as loops.

    q (B, H, T, D), k (B, H, S, D) float64; ``bias(b, h, i, j)`` -> float or None.
    Returns nested lists probs[b][h][i][j] (masked keys get 0.0)."""
    B, H, T, D = q.shape
    S = k.shape[2]
    scale = 1.0 / math.sqrt(D)
    probs = [[[[0.0] * S for _ in range(T)] for _ in range(H)] for _ in range(B)]
    for b in range(B):
        for h in range(H):
            for i in range(T):
                logits = {}
                for j in range(S):
                    if kpm is not None and bool(kpm[b, j]):
                        continue
                    if causal and j > i + (S - T):
                        continue
                    s = float(sum(q[b, h, i, d] * k[b, h, j, d] for d in range(D))) * scale
                    if bias is not None:
                        s += bias(b, h, i, j)
                    if s != float("-inf"):
                        logits[j] = s
                if not logits:  # no key left: the core outputs zeros for this row
                    continue
                m = max(logits.values())
                z = sum(math.exp(s - m) for s in logits.values())
                for j, s in logits.items():
                    probs[b][h][i][j] = math.exp(s - m) / z
    return probs


def loop_apply64(probs, v):
    """out[b, h, i] = sum_j probs[b][h][i][j] * v[b, h, j] (float64 tensor)."""
    B, H, S, D = v.shape
    T = len(probs[0][0])
    out = torch.zeros(B, H, T, D, dtype=torch.float64)
    for b in range(B):
        for h in range(H):
            for i in range(T):
                for j in range(S):
                    out[b, h, i] += probs[b][h][i][j] * v[b, h, j]
    return out


def causal_mask(T):
    """fairseq's future mask for decoder self-attention (T, T) float."""
    return torch.triu(torch.full((T, T), float("-inf")), 1)


def incremental_outputs(attn, x):
    """Run ``attn`` one step at a time with a cache; returns (T, B, C)."""
    state = {}
    steps = []
    for t in range(x.size(0)):
        y, _ = attn(x[t:t + 1], x[t:t + 1], x[t:t + 1], incremental_state=state, need_weights=False)
        steps.append(y)
    return torch.cat(steps, dim=0)


def assert_incremental_equals_full(attn, length=5):
    """One sentence decoded a step at a time with a cache equals the full pass under
    fairseq's future mask."""
    from attn_helpers import padded_batch

    x, _ = padded_batch([length])
    full, _ = attn(x, x, x, attn_mask=causal_mask(length), need_weights=False)
    torch.testing.assert_close(incremental_outputs(attn, x), full, rtol=1e-5, atol=1e-5)


def assert_matches_reference(attn, reference, lengths, **tol):
    """For left and right padding (float64), the layer's output on real tokens equals
    ``reference(attn, x, kpm)`` (T, B, C)."""
    from attn_helpers import padded_batch

    for left in (True, False):
        x, kpm = padded_batch(lengths, left_pad=left, dtype=torch.float64)
        y, _ = attn(x, x, x, key_padding_mask=kpm, need_weights=False)
        real = ~kpm.t()
        torch.testing.assert_close(y[real], reference(attn, x, kpm)[real], **tol)


def assert_gradients_reach(attn, lengths, *names):
    """After the backward of the summed squared output, every entry of the piece's
    parameters ``names`` has a non-zero gradient."""
    from attn_helpers import padded_batch

    x, kpm = padded_batch(lengths)
    y, _ = attn(x, x, x, key_padding_mask=kpm)
    y.pow(2).sum().backward()
    for name in names:
        g = getattr(attn.pieces[0], name).grad
        assert g is not None and bool((g != 0).all()), name


def real_rows(y, kpm):
    """The outputs of real tokens only, in sentence order: list over the batch of (n_b, C)."""
    return [y[~kpm[b], b] for b in range(y.size(1))]


def assert_padding_invariant(attn, lengths, embed_dim=16, seed=3):
    """Left and right padding of the same sentences give the same real outputs,
    and each sentence alone (no padding) gives them too."""
    g = torch.Generator().manual_seed(seed)
    T = max(lengths)
    sents = [torch.randn(n, embed_dim, generator=g) for n in lengths]
    results = {}
    for left in (True, False):
        x = torch.zeros(T, len(lengths), embed_dim)
        kpm = torch.zeros(len(lengths), T, dtype=torch.bool)
        for b, s in enumerate(sents):
            n = s.size(0)
            if left:
                x[T - n:, b], kpm[b, : T - n] = s, True
            else:
                x[:n, b], kpm[b, n:] = s, True
        y, _ = attn(x, x, x, key_padding_mask=kpm, need_weights=False)
        results[left] = real_rows(y, kpm)
    for b, s in enumerate(sents):
        alone, _ = attn(s[:, None], s[:, None], s[:, None], need_weights=False)
        torch.testing.assert_close(results[True][b], alone[:, 0], rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(results[False][b], alone[:, 0], rtol=1e-5, atol=1e-5)


def loop_conv1d_attention(probs, kpm, weight, bias, t, kernel, relu=True):
    """convattn1d written out: per head, channels = key positions within the
    sentence, t filters of width ``kernel`` over query rows; pads zero after.

    weight (H*t, t, kernel), bias (H*t,) as in the piece."""
    B, H, T = len(probs), len(probs[0]), len(probs[0][0])
    out = [[[[0.0] * T for _ in range(T)] for _ in range(H)] for _ in range(B)]
    half = kernel // 2
    for b in range(B):
        pos = sentence_positions(kpm[b])
        col_of = {p: j for j, p in enumerate(pos) if p >= 0}  # position -> index
        for h in range(H):
            for i in range(T):
                if pos[i] < 0:
                    continue
                for j in range(T):
                    if pos[j] < 0:
                        continue
                    o = pos[j]
                    s = float(bias[h * t + o])
                    for r in range(kernel):
                        ii = i + r - half
                        if ii < 0 or ii >= T or pos[ii] < 0:  # outside or a pad row: zero
                            continue
                        for c, jj in col_of.items():
                            s += float(weight[h * t + o, c, r]) * probs[b][h][ii][jj]
                    out[b][h][i][j] = max(s, 0.0) if relu else s
    return out


def loop_conv2d_attention(probs, kpm, weight, bias, kernel, relu=True):
    """convattn2d written out: one kernel x kernel filter per head over the
    (query, key) plane with zero padding; pads zero before and after.

    weight (H, 1, k, k), bias (H,) as in the piece."""
    B, H, T = len(probs), len(probs[0]), len(probs[0][0])
    half = kernel // 2
    out = [[[[0.0] * T for _ in range(T)] for _ in range(H)] for _ in range(B)]
    for b in range(B):
        for h in range(H):
            for i in range(T):
                for j in range(T):
                    if bool(kpm[b, i]) or bool(kpm[b, j]):
                        continue
                    s = float(bias[h])
                    for r in range(kernel):
                        for c in range(kernel):
                            ii, jj = i + r - half, j + c - half
                            if 0 <= ii < T and 0 <= jj < T and not kpm[b, ii] and not kpm[b, jj]:
                                s += float(weight[h, 0, r, c]) * probs[b][h][ii][jj]
                    out[b][h][i][j] = max(s, 0.0) if relu else s
    return out


def loop_chain64(probs, v, k, w_attn):
    """Chained attention written out: z^1 = P V, z^k = P z^{k-1}.

    ``w_attn`` (D, K*D), the shared form (Gupta's W_attn^T): per head and position,
    out_h = w_attn @ [z^1_h; ...; z^K_h]. ``w_attn`` (C, H*K*D), the dense form: per
    position the heads' K outputs are concatenated (head-major) and multiplied by it.
    Returns (B, H, T, D) laid out like the core's heads."""
    B, H, S, D = v.shape
    T = len(probs[0][0])
    chain = [loop_apply64(probs, v)]
    for _ in range(k - 1):
        prev, nxt = chain[-1], torch.zeros(B, H, T, D, dtype=torch.float64)
        for b in range(B):
            for h in range(H):
                for i in range(T):
                    for j in range(T):
                        nxt[b, h, i] += probs[b][h][i][j] * prev[b, h, j]
        chain.append(nxt)
    if tuple(w_attn.shape) == (D, k * D):  # shared by the heads
        out = torch.zeros(B, H, T, D, dtype=torch.float64)
        for b in range(B):
            for h in range(H):
                for i in range(T):
                    concat = torch.cat([chain[kk][b, h, i] for kk in range(k)])
                    for d in range(D):
                        out[b, h, i, d] = sum(float(w_attn[d, m]) * float(concat[m]) for m in range(k * D))
        return out
    C = w_attn.size(0)
    y = torch.zeros(B, T, C, dtype=torch.float64)
    for b in range(B):
        for i in range(T):
            concat = torch.cat([chain[kk][b, h, i] for h in range(H) for kk in range(k)])
            for c in range(C):
                y[b, i, c] = sum(float(w_attn[c, m]) * float(concat[m]) for m in range(concat.numel()))
    return y.view(B, T, H, D).permute(0, 2, 1, 3)
