"""Which KV blocks a windowed sequence (`attention_window=W`) still reads; whether a request fits the pool.

Key j is visible from query i iff i - W < j <= i. A token at position p therefore reads keys from
max(p + 1 - W, 0) on, and `transformer.paged_attention` (PagedAttentionLowering.cpp, tokenHeads)
visits only the blocks from that position's block to p's own: a block that ends at or before
p + 1 - W is never read again by this token or any later one of the same sequence. The engine
gives such blocks back after every step, so a windowed sequence holds O(W) blocks, not O(length).
"""


def first_visible_block(position: int, window: int | None, block_size: int) -> int:
    """The first block a token at `position` reads (0 without a window): every block before it is
    dead for this sequence from now on, since later tokens see even less of the past."""
    if window is None:
        return 0
    return max(position + 1 - window, 0) // block_size


def blocks_spanned(start: int, count: int, window: int | None, block_size: int) -> int:
    """Blocks a step of `count` new tokens at positions start .. start + count - 1 needs at once:
    those its first token reads (from its window's first block) up to the one its last token
    writes."""
    return (start + count - 1) // block_size - first_visible_block(start, window, block_size) + 1


def most_blocks_needed(total: int, window: int | None, block_size: int) -> int:
    """Blocks a sequence of `total` positions needs at any one moment when it runs alone, one token
    a step if need be: all of them without a window; with one, no more than a single token's window
    can touch (W positions over at most (W + S - 2) // S + 1 blocks, S = block_size, when the
    window starts on a block's last row)."""
    every_block = -(-total // block_size)
    if window is None:
        return every_block
    return min(every_block, (window + block_size - 2) // block_size + 1)


def largest_fitting_chunk(start: int, count: int, window: int | None, block_size: int, num_blocks: int) -> int:
    """The most of `count` new tokens from position `start` whose step needs at most `num_blocks`
    blocks (blocks_spanned), and at least 1: a prompt chunk is cut down rather than left unable to
    run even in an otherwise empty pool. Without a window, `count` (an admitted sequence fits the
    pool whole)."""
    if window is None:
        return count
    last_block = first_visible_block(start, window, block_size) + num_blocks - 1
    return max(1, min(count, (last_block + 1) * block_size - start))


def check_fits_pool(prompt_tokens: int, max_tokens: int, window: int | None, block_size: int, num_blocks: int) -> None:
    """ValueError unless a request of `prompt_tokens` + `max_tokens` positions can run in a pool of
    `num_blocks` blocks (most_blocks_needed: with a window, only one token's window must fit)."""
    total = prompt_tokens + int(max_tokens)
    needed = most_blocks_needed(total, window, block_size)
    if needed > num_blocks:
        windowed = needed < -(-total // block_size)  # the window, not the length, decides
        at_once = f" at once (one token's window of {window} positions)" if windowed else ""
        raise ValueError(
            f"{prompt_tokens} prompt tokens + max_tokens={max_tokens} need {needed} blocks "
            f"of {block_size}{at_once}, more than the pool's {num_blocks}"
        )
