"""Progress lines of a fairseq-train run, from its json log lines as they come (the demo prints
them while each architecture trains)."""

import json


class EpochProgress:
    """The demo's progress lines of one training, from fairseq-train's json log lines as they
    come: the parameter count, resumes, and per epoch one line with its last validation loss
    and one with its training averages. fairseq validates at every mid-epoch checkpoint (many
    per epoch) and logs the epoch's ``train`` record after its last validation: a validation is
    held until the next one replaces it or the epoch's record prints it (:meth:`flush` prints
    one still held when the training ends without that record)."""

    def __init__(self, arch: str, max_epoch: int, out=None):
        self.arch, self.max_epoch, self.out, self.valid = arch, max_epoch, out or print, None

    def __call__(self, line: str) -> None:
        if "| valid |" in line or "| train |" in line:
            stats = json.loads(line[line.index("{"):])
            if "valid_loss" in stats:
                self.valid = stats
                return
            self.flush()
            self.out(f"  {self.arch} epoch {stats['epoch']}/{self.max_epoch}: train loss {stats['train_loss']}, "
                     f"{stats['train_wps']} tok/s")
        elif "num. shared model params" in line or "Loaded checkpoint" in line:
            self.out("  " + line.split("| ")[-1].strip())

    def flush(self) -> None:
        if self.valid is not None:
            stats, self.valid = self.valid, None
            self.out(f"  {self.arch} epoch {stats['epoch']}/{self.max_epoch}: valid loss {stats['valid_loss']}")
