/* Counter-based random numbers for sampling (splitmix64 finaliser as the bijective mixer).
 *
 * Every (seed, hop, destination node) owns a stream: draw r of the stream is a pure function of
 * (seed, hop, node, r), so the sampled neighbours never depend on the thread that handles a node or on the
 * order of nodes. tests/storage_kernels/reference.py reimplements exactly this (keep them in step):
 *
 *   hop_key    = mix64(mix64(seed + G0) ^ (hop + G1))
 *   stream_key = mix64(hop_key ^ (node + G2))
 *   draw(r)    = mix64(stream_key + (r + 1) * G0)        (splitmix64 output r of state stream_key)
 *   below(x,n) = (x * n) >> 64                           (Lemire multiply-shift; bias <= n / 2^64)
 *
 * all arithmetic modulo 2^64. */
#ifndef STRATA_NATIVE_RNG_H
#define STRATA_NATIVE_RNG_H

#include <stdint.h>

#define SK_RNG_G0 0x9E3779B97F4A7C15ULL
#define SK_RNG_G1 0xD1B54A32D192ED03ULL
#define SK_RNG_G2 0x8CB92BA72F3D8DD7ULL

static inline uint64_t sk_mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

static inline uint64_t sk_rng_hop_key(uint64_t seed, uint64_t hop) {
    return sk_mix64(sk_mix64(seed + SK_RNG_G0) ^ (hop + SK_RNG_G1));
}

static inline uint64_t sk_rng_stream_key(uint64_t hop_key, uint64_t node) {
    return sk_mix64(hop_key ^ (node + SK_RNG_G2));
}

static inline uint64_t sk_rng_draw(uint64_t stream_key, uint64_t r) { return sk_mix64(stream_key + (r + 1) * SK_RNG_G0); }

/* The dropout mask (nn/dropout.c, nn/attention.c): element i is kept when the low (i even) or high (i odd)
 * 32 bits of splitmix64 output i / 2 of state `key` (= sk_mix64(seed + G0)) are >= `threshold`
 * (floor(p * 2^32)). */
static inline int sk_dropout_keep(uint64_t key, uint64_t threshold, int64_t i) {
    const uint64_t z = sk_mix64(key + (uint64_t)(i / 2 + 1) * SK_RNG_G0);
    return (uint64_t)((i & 1) ? (uint32_t)(z >> 32) : (uint32_t)z) >= threshold;
}

/* Uniform integer in [0, n) from a 64-bit draw. */
static inline uint64_t sk_rng_below(uint64_t x, uint64_t n) { return (uint64_t)(((unsigned __int128)x * n) >> 64); }

#endif /* STRATA_NATIVE_RNG_H */
