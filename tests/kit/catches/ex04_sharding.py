"""ex04's wrong implementations, as data: the sharding mistakes learners really make, each with the check that
must fail it (and the cause its message must name where one is given), and other right ways to do it, which
must score full marks. tests/kit/test_catches.py grades them."""

from tests.kit.catching import Right, Wrong, mutate

EX = "ex04_sharding"

SPLIT = "torch.tensor_split(batch, world_size, dim=0)[rank]"
PAD = "indices = (indices * math.ceil(total / num_samples))[:total]"
SHUFFLE = ("        generator = torch.Generator()\n        generator.manual_seed(seed + epoch)\n"
           "        indices = torch.randperm(num_samples, generator=generator).tolist()\n")
RETURN = "return [int(i) for i in indices[rank:total:world_size]]"


WRONG = [
    # contiguous blocks where DistributedSampler strides
    Wrong("contiguous_blocks", mutate(EX, ("indices[rank:total:world_size]", "indices[rank * (total // world_size):(rank + 1) * (total // world_size)]")),
          "test_shard_indices_match_distributed_sampler", diagnosis="not a contiguous block"),
    # no padding: the last ranks get fewer indices
    Wrong("no_padding", mutate(EX, (PAD, "pass")), "test_shards_are_equal_sized_and_cover_the_data"),
    # padded with one copy of the start: too short when the padding is longer than the data (2 samples, 5 ranks)
    Wrong("pads_once", mutate(EX, (PAD, "indices = indices + indices[:total - num_samples]")),
          "test_shard_indices_match_distributed_sampler", diagnosis="pad by wrapping around"),
    # the epoch ignored: every epoch shuffles the same way
    Wrong("ignores_epoch", mutate(EX, ("manual_seed(seed + epoch)", "manual_seed(seed)")),
          "test_shard_indices_match_distributed_sampler", diagnosis="seed the generator with seed + epoch"),
    # drop_last rounds the wrong way
    Wrong("drop_last_rounds_up", mutate(EX, ("math.ceil((num_samples - world_size) / world_size)", "math.ceil(num_samples / world_size)")),
          "test_shard_indices_match_distributed_sampler", diagnosis="with drop_last the tail is cut"),
    # a tensor instead of a list of ints
    Wrong("returns_tensor", mutate(EX, (RETURN, "return torch.tensor(indices[rank:total:world_size], dtype=torch.long)")),
          "test_shard_indices_match_distributed_sampler"),
    # the right permutation from the global generator: the caller's random stream is reseeded
    Wrong("seeds_the_global_generator", mutate(EX, (SHUFFLE, "        torch.manual_seed(seed + epoch)\n"
                                                             "        indices = torch.randperm(num_samples).tolist()\n")),
          "test_shard_indices_leave_the_global_random_stream_alone"),
    # torch.chunk sizes differ from tensor_split
    Wrong("chunk_not_tensor_split", mutate(EX, (SPLIT, "(list(torch.chunk(batch, world_size)) + [batch[:0]] * world_size)[rank]")),
          "test_shard_batch_matches_tensor_split", diagnosis="torch.chunk makes pieces"),
    # the remainder goes to the last shard instead of the first ones
    Wrong("remainder_last", mutate(EX, (SPLIT, "batch[rank * (len(batch) // world_size):(rank + 1) * (len(batch) // world_size) if rank < world_size - 1 else None]")),
          "test_shard_batch_matches_tensor_split", diagnosis="not all to the last"),
    # every world_size-th row, as the sampler deals indices
    Wrong("strided_batch", mutate(EX, (SPLIT, "batch[rank::world_size]")), "test_shard_batch_matches_tensor_split",
          diagnosis="not every world_size-th row"),
    # the piece copied to the CPU (on a GPU it leaves the GPU; on the meta device it cannot be copied)
    Wrong("batch_moved_to_cpu", mutate(EX, (SPLIT, "torch.tensor_split(batch.cpu(), world_size, dim=0)[rank]")),
          "test_shard_batch_keeps_the_batch_device"),
    # the piece copied to the CPU, except on the meta device the grader uses without a GPU
    Wrong("batch_moved_to_cpu_unless_meta", mutate(EX, (SPLIT, "torch.tensor_split(batch if batch.is_meta else batch.cpu(), "
                                                               "world_size, dim=0)[rank]")),
          "test_shard_batch_keeps_the_batch_device"),
    # rebuilt from Python lists: a new tensor on the CPU
    Wrong("batch_rebuilt_from_list", mutate(EX, (SPLIT, "torch.tensor_split(torch.tensor(batch.tolist(), dtype=batch.dtype)"
                                                        ".reshape(batch.shape), world_size, dim=0)[rank]")),
          "test_shard_batch_keeps_the_batch_device"),
]

# other right ways to do it: they must score full marks
RIGHT = [
    # torch's own sampler, then a plain slice of the batch
    Right("distributed_sampler", mutate(EX, ("    if num_samples <= 0:\n        return []\n",
                                             "    from torch.utils.data import DistributedSampler\n"
                                             "    sampler = DistributedSampler(range(num_samples), num_replicas=world_size, rank=rank,\n"
                                             "                                 shuffle=shuffle, seed=seed, drop_last=drop_last)\n"
                                             "    sampler.set_epoch(epoch)\n"
                                             "    return list(sampler)\n"),
                                        (SPLIT, "batch[rank * (len(batch) // world_size) + min(rank, len(batch) % world_size):"
                                                "(rank + 1) * (len(batch) // world_size) + min(rank + 1, len(batch) % world_size)]"))),
    # floor division for drop_last: the same count as ceil((n - W) / W) when n % W
    Right("floor_division", mutate(EX, ("math.ceil((num_samples - world_size) / world_size)", "num_samples // world_size"))),
]
