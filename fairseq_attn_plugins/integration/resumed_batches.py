"""A run resumed in a later epoch trains on the batches the uninterrupted run trains on.

fairseq 0.12.3 groups the training sentences into batches once, when the training iterator is
made, with a seed that includes the epoch it is made for (``numpy_seed(seed + epoch)`` around
``ordered_indices``; with ``--update-ordered-indices-seed`` the seed of the whole iterator
includes it too). An uninterrupted run makes that iterator at epoch 1 and keeps it for every
epoch (``can_reuse_epoch_itr``), shuffling only the order of those batches per epoch. A run
resumed in epoch E > 1 made it for epoch E: other batches, so from the first update after the
resume its losses and parameters differed from the uninterrupted run's (a resume in epoch 1 was
exact). Here the kept iterator of a resumed run is made as at epoch 1 and then set to epoch E;
the checkpoint's iterator state (epoch, batches consumed, shuffle) is loaded on it as before.

An iterator fairseq makes afresh each epoch in an uninterrupted run too (sharded data,
``--update-epoch-batch-itr``, a dataset that cannot be reused across epochs, a caller disabling
the cache), or whose batches it makes again each epoch (a task's ``rebuild_batches``), is left as
fairseq makes it: both runs make them for epoch E. Installed by :mod:`.fixes`.
"""

import logging

logger = logging.getLogger("fairseq.trainer")


def kept_iterator_as_at_epoch_one(original):
    """fairseq's ``Trainer.get_train_iterator`` making the iterator kept across epochs as the
    uninterrupted run made it (a row of :mod:`.fixes`)."""
    def get_train_iterator(self, epoch, combine=True, load_dataset=True, data_selector=None,
                           shard_batch_itr=True, disable_iterator_cache=False):
        rest = dict(combine=combine, data_selector=data_selector, shard_batch_itr=shard_batch_itr,
                    disable_iterator_cache=disable_iterator_cache)
        if epoch <= 1 or disable_iterator_cache or self.cfg.dataset.update_epoch_batch_itr:
            return original(self, epoch, load_dataset=load_dataset, **rest)
        subset = self.cfg.dataset.train_subset
        task = self.task
        if load_dataset:  # the data of epoch E, as fairseq's get_train_iterator loads it
            logger.info("loading train data for epoch %d", epoch)
            task.load_dataset(subset, epoch=epoch, combine=combine, data_selector=data_selector, tpu=self.tpu)
        dataset = task.dataset(subset)
        rebuilt = getattr(getattr(task, "cfg", None), "rebuild_batches", False)  # batches made per epoch
        if dataset in task.dataset_to_epoch_iter or not task.can_reuse_epoch_itr(dataset) or rebuilt:
            return original(self, epoch, load_dataset=False, **rest)  # kept already, or made per epoch
        itr = original(self, 1, load_dataset=False, **rest)
        itr.epoch = epoch
        dataset.set_epoch(epoch)
        return itr

    return get_train_iterator
