"""Choosing the next token from logits: the one sampler lives in gpt_runtime.sampling (pure numpy),
so that the GPU runtime, which must not import gpt, samples exactly as gpt does."""

from gpt_runtime.sampling import MIN_TEMPERATURE, allowed_probabilities, check_sampling_args, sample

__all__ = ["MIN_TEMPERATURE", "allowed_probabilities", "check_sampling_args", "sample"]
