/*
 * The fp32 optimizer updates over OV_W elements at a time, included by optim.c once per
 * vector width: OV_W doubles per vector, names suffixed OV_SUF, functions given the
 * attributes OV_ATTR, OV_SQRT(v) the vector square root. A lane holds one element; every
 * lane runs optim.c's scalar expressions (the reference's) in their order, in IEEE double
 * without fma (optim.c keeps contraction off; sqrt is correctly rounded in both), and rounds
 * each store once to fp32 as the scalar cast does: every width gives the scalar bits.
 * Each function does the elements [lo, lo + n) with n a multiple of OV_W.
 */
#define OV_CAT2(a, b) a##b
#define OV_CAT(a, b) OV_CAT2(a, b)
#define OV_VD OV_CAT(ov_vd_, OV_SUF)
#define OV_VF OV_CAT(ov_vf_, OV_SUF)

typedef double OV_VD OV_VECTOR_BYTES(8 * OV_W);
typedef float OV_VF OV_VECTOR_BYTES(4 * OV_W);

OV_ATTR static inline OV_VD OV_CAT(ov_ld_, OV_SUF)(const float *p)
{
    OV_VF f;
    memcpy(&f, p, sizeof f);
    return __builtin_convertvector(f, OV_VD);
}

OV_ATTR static inline void OV_CAT(ov_st_, OV_SUF)(float *p, OV_VD v)
{
    const OV_VF f = __builtin_convertvector(v, OV_VF);
    memcpy(p, &f, sizeof f);
}

/* scaled_grad: g grad_scale + (decoupled ? 0 : weight_decay p) */
OV_ATTR static inline OV_VD OV_CAT(ov_grad_, OV_SUF)(const optim_job *j, int64_t i,
                                                     bool decoupled)
{
    const OV_VD g = OV_CAT(ov_ld_, OV_SUF)(j->g + i) * j->grad_scale;
    if (decoupled)
        return g + 0.0;
    return g + j->opt->weight_decay * OV_CAT(ov_ld_, OV_SUF)(j->p + i);
}

OV_ATTR static void OV_CAT(sgd_lanes_, OV_SUF)(const optim_job *j, int64_t lo, int64_t n)
{
    const double lr = j->opt->lr;
    for (int64_t i = lo; i < lo + n; i += OV_W) {
        const OV_VD g = OV_CAT(ov_grad_, OV_SUF)(j, i, false);
        OV_CAT(ov_st_, OV_SUF)(j->p + i, OV_CAT(ov_ld_, OV_SUF)(j->p + i) - lr * g);
    }
}

OV_ATTR static void OV_CAT(momentum_lanes_, OV_SUF)(const optim_job *j, int64_t lo, int64_t n)
{
    const ck_optimizer *opt = j->opt;
    for (int64_t i = lo; i < lo + n; i += OV_W) {
        const OV_VD g = OV_CAT(ov_grad_, OV_SUF)(j, i, false);
        const OV_VD v =
            j->step == 1 ? g : opt->momentum * OV_CAT(ov_ld_, OV_SUF)(j->s0 + i) + g;
        OV_CAT(ov_st_, OV_SUF)(j->s0 + i, v);
        OV_CAT(ov_st_, OV_SUF)(j->p + i, OV_CAT(ov_ld_, OV_SUF)(j->p + i) - opt->lr * v);
    }
}

OV_ATTR static void OV_CAT(adam_lanes_, OV_SUF)(const optim_job *j, int64_t lo, int64_t n,
                                                bool decoupled)
{
    const ck_optimizer *opt = j->opt;
    const double decay = decoupled ? 1.0 - opt->lr * opt->weight_decay : 1.0;
    const OV_VD zero = {0};
    for (int64_t i = lo; i < lo + n; i += OV_W) {
        const OV_VD g = OV_CAT(ov_grad_, OV_SUF)(j, i, decoupled);
        const OV_VD m_prev = j->step == 1 ? zero : OV_CAT(ov_ld_, OV_SUF)(j->s0 + i);
        const OV_VD v_prev = j->step == 1 ? zero : OV_CAT(ov_ld_, OV_SUF)(j->s1 + i);
        const OV_VD m = opt->beta1 * m_prev + (1.0 - opt->beta1) * g;
        const OV_VD v = opt->beta2 * v_prev + (1.0 - opt->beta2) * g * g;
        OV_CAT(ov_st_, OV_SUF)(j->s0 + i, m);
        OV_CAT(ov_st_, OV_SUF)(j->s1 + i, v);
        const OV_VD mhat = m / j->bias_corr1, vhat = v / j->bias_corr2;
        OV_CAT(ov_st_, OV_SUF)(j->p + i, OV_CAT(ov_ld_, OV_SUF)(j->p + i) * decay -
                                             opt->lr * mhat / (OV_SQRT(vhat) + opt->eps));
    }
}

#undef OV_VD
#undef OV_VF
#undef OV_CAT
#undef OV_CAT2
