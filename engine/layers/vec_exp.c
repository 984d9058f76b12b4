/* e^x over the lanes of a GCC/clang float vector, shared by the attention kernels (paged_decode.c at 8 lanes,
   prefill_attention.c at its own width). Included by them, never compiled on its own (cpu_kernels.py hashes it
   with the sources). The includer defines VEXP_F (the float vector type), VEXP_I (the int vector of its width),
   VEXP_SPLAT(x) (x in every lane) and the names VEXP (e^x) and VEXP_SELECT (lane-wise mask ? a : b) this
   instantiates; they are undefined again at the end.

   For x <= 0 (scores minus their max): x = n ln2 + r, e^r by Cephes' expf polynomial (~1 ulp, as SDPA's
   vectorised exp), 2^n built in the exponent bits; 0 below -87.3 (expf gives < 1.2e-38 there: nothing beside
   the max's 1), -inf included. */

static inline VEXP_F VEXP_SELECT(VEXP_I mask, VEXP_F a, VEXP_F b) {
    VEXP_I ai, bi;
    memcpy(&ai, &a, sizeof ai);
    memcpy(&bi, &b, sizeof bi);
    const VEXP_I r = (mask & ai) | (~mask & bi);
    VEXP_F out;
    memcpy(&out, &r, sizeof out);
    return out;
}

static inline VEXP_F VEXP(VEXP_F x) {
    const VEXP_F lo = VEXP_SPLAT(-87.3f);
    const VEXP_I under = x < lo;
    x = VEXP_SELECT(under, lo, x);
    /* x <= 0: truncation rounds to nearest */
    const VEXP_I n = __builtin_convertvector(x * VEXP_SPLAT(1.44269504088896341f) - VEXP_SPLAT(0.5f), VEXP_I);
    const VEXP_F nf = __builtin_convertvector(n, VEXP_F);
    const VEXP_F r = x - nf * VEXP_SPLAT(0.693359375f) - nf * VEXP_SPLAT(-2.12194440e-4f);
    VEXP_F p = VEXP_SPLAT(1.9875691500E-4f);
    p = p * r + VEXP_SPLAT(1.3981999507E-3f);
    p = p * r + VEXP_SPLAT(8.3334519073E-3f);
    p = p * r + VEXP_SPLAT(4.1665795894E-2f);
    p = p * r + VEXP_SPLAT(1.6666665459E-1f);
    p = p * r + VEXP_SPLAT(5.0000001201E-1f);
    p = p * r * r + r + VEXP_SPLAT(1.f);
    const VEXP_I bits = (n + 127) << 23;
    VEXP_F two_n;
    memcpy(&two_n, &bits, sizeof two_n);
    return VEXP_SELECT(under, VEXP_SPLAT(0.f), p * two_n);
}

#undef VEXP_F
#undef VEXP_I
#undef VEXP_SPLAT
#undef VEXP
#undef VEXP_SELECT
