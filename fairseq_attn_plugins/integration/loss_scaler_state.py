"""fp16 training resumed with the loss scaler's whole state, not its scale alone.

fairseq 0.12.3's fp16 optimizers (``--fp16``, ``--memory-efficient-fp16``) save the dynamic loss
scaler's current scale in the optimizer state (``loss_scale``) but not its counters: the
iteration, the last overflow and the last rescale. A resumed run restarted them at 0, so it
doubled its scale at other updates than the uninterrupted run (every ``--fp16-scale-window``
updates counted from the resume) and its parameters drifted apart from there. The counters are
saved beside the scale (``loss_scaler``) and restored with it; a checkpoint without them loads
as before. bf16 has no scaler: nothing changes. (``--amp``'s torch GradScaler is not saved by
fairseq at all; see docs.) Installed by :mod:`.fixes`.
"""

#: the counters of fairseq's DynamicLossScaler that decide when it next rescales
COUNTERS = ("_iter", "_last_overflow_iter", "_last_rescale_iter", "_overflows_since_rescale")
KEY = "loss_scaler"


def with_counters(original):
    """An fp16 optimizer's ``state_dict`` with the scaler's counters (a row of :mod:`.fixes`)."""
    def state_dict(self):
        state = original(self)
        if self.scaler is not None:
            state[KEY] = {name.lstrip("_"): getattr(self.scaler, name) for name in COUNTERS}
        return state

    return state_dict


def counters_restored(original):
    """An fp16 optimizer's ``load_state_dict`` restoring the counters saved by :func:`with_counters`
    (a row of :mod:`.fixes`)."""
    def load_state_dict(self, state_dict, optimizer_overrides=None):
        saved = state_dict.get(KEY)
        original(self, state_dict, optimizer_overrides)
        if saved is not None and self.scaler is not None:
            for name in COUNTERS:
                setattr(self.scaler, name, saved[name.lstrip("_")])

    return load_state_dict
