"""ex04's checks catch the sharding mistakes learners really make."""

from tests.kit.harness import assert_caught, grade_submissions, mutate

EX = "ex04_sharding"

WRONG = {
    # contiguous blocks where DistributedSampler strides
    "contiguous_blocks": (mutate(EX, ("indices[rank:total:world_size]", "indices[rank * (total // world_size):(rank + 1) * (total // world_size)]")),
                          "test_shard_indices_match_distributed_sampler"),
    # no padding: the last ranks get fewer indices
    "no_padding": (mutate(EX, ("indices = (indices * math.ceil(total / num_samples))[:total]", "pass")),
                   "test_shards_are_equal_sized_and_cover_the_data"),
    # the epoch ignored: every epoch shuffles the same way
    "ignores_epoch": (mutate(EX, ("manual_seed(seed + epoch)", "manual_seed(seed)")),
                      "test_shard_indices_match_distributed_sampler"),
    # drop_last rounds the wrong way
    "drop_last_rounds_up": (mutate(EX, ("math.ceil((num_samples - world_size) / world_size)", "math.ceil(num_samples / world_size)")),
                            "test_shard_indices_match_distributed_sampler"),
    # a tensor instead of a list of ints
    "returns_tensor": (mutate(EX, ("return [int(i) for i in indices[rank:total:world_size]]", "return torch.tensor(indices[rank:total:world_size], dtype=torch.long)")),
                       "test_shard_indices_match_distributed_sampler"),
    # torch.chunk sizes differ from tensor_split
    "chunk_not_tensor_split": (mutate(EX, ("torch.tensor_split(batch, world_size, dim=0)[rank]", "(list(torch.chunk(batch, world_size)) + [batch[:0]] * world_size)[rank]")),
                               "test_shard_batch_matches_tensor_split"),
    # the remainder goes to the last shard instead of the first ones
    "remainder_last": (mutate(EX, ("torch.tensor_split(batch, world_size, dim=0)[rank]", "batch[rank * (len(batch) // world_size):(rank + 1) * (len(batch) // world_size) if rank < world_size - 1 else None]")),
                       "test_shard_batch_matches_tensor_split"),
}


def test_wrong_sharding_is_caught(tmp_path):
    results = grade_submissions(tmp_path, EX, {name: source for name, (source, _) in WRONG.items()})
    assert_caught(results, {name: check for name, (_, check) in WRONG.items()})
