"""The declarative seed table for torch: one :class:`~cuda_agent.synth.ops.OpSpec` per operator
(or operator variant), built with a few short constructors per category.

Known operators that are deliberately not seeds are listed in :data:`KNOWN_SKIPS` with the
reason; the crawl (:mod:`cuda_agent.synth.crawl`) compares this table with what torch exposes.
"""

from __future__ import annotations

from .ops import Extra, OpSpec

SAME = lambda s, p: s  # noqa: E731  (extra input with the running tensor's shape)
LAST = lambda s, p: (s[-1],)  # noqa: E731
CHAN = lambda s, p: (s[1],)  # noqa: E731
ROWS = lambda s, p: s[:1]  # noqa: E731

EW = ("vec", "seq", "img")
IMG, SIG, VOL = ("img",), ("sig",), ("vol",)
DENSE = ("dense", "seq")


def _fits(max_last: int = 8192):
    return lambda s: s[-1] <= max_last


def _spatial(min_hw: int = 8, max_c: int = 512):
    return lambda s: min(s[2:]) >= min_hw and s[1] <= max_c


def U(api: str, expr: str | None = None, cat: str = "elementwise", **kw) -> OpSpec:
    """A unary elementwise (or elementwise-like) op applied to the running tensor."""
    return OpSpec(name=kw.pop("name", api), category=cat, api=api,
                  expr=expr or f"{api}({{x}})", families=kw.pop("families", EW), **kw)


def M(cls: str, args: str = "", cat: str = "activation", name: str | None = None, **kw) -> OpSpec:
    """An ``nn`` module called on the running tensor."""
    return OpSpec(name=name or f"nn.{cls}" + (f"({args})" if args else ""), category=cat,
                  api=f"torch.nn.{cls}", expr=kw.pop("expr", "{m}({x})"),
                  module=f"nn.{cls}({args})", families=kw.pop("families", EW), **kw)


def FN(fn: str, args: str = "", cat: str = "activation", name: str | None = None, **kw) -> OpSpec:
    """A ``torch.nn.functional`` call on the running tensor."""
    a = f", {args}" if args else ""
    return OpSpec(name=name or f"F.{fn}" + (f"({args})" if args else ""), category=cat,
                  api=f"torch.nn.functional.{fn}", expr=kw.pop("expr", f"F.{fn}({{x}}{a})"),
                  families=kw.pop("families", EW), **kw)


def B(api: str, expr: str | None = None, kind: str = "randn", cat: str = "binary", **kw) -> OpSpec:
    """A binary op with a second same-shape input."""
    return OpSpec(name=kw.pop("name", api), category=cat, api=api,
                  expr=expr or f"{api}({{x}}, {{y0}})", extras=(Extra(SAME, kind),),
                  families=kw.pop("families", EW), **kw)


def R(api: str, expr: str, cat: str = "reduction", **kw) -> OpSpec:
    """A reduction / scan along a dim of the running tensor (``{dim}`` is sampled)."""
    return OpSpec(name=kw.pop("name", api), category=cat, api=api, expr=expr,
                  families=kw.pop("families", EW), **kw)


def _table() -> list[OpSpec]:
    """The seed operators, one entry per line (long because it is a table: data, not logic)."""
    t: list[OpSpec] = []
    # --- elementwise math (torch) -------------------------------------------------------
    for f in ["abs", "neg", "exp", "exp2", "expm1", "sin", "cos", "tan", "atan", "sinh", "cosh",
              "tanh", "asinh", "sigmoid", "erf", "erfc", "floor", "ceil", "round", "trunc", "frac",
              "sign", "square", "relu", "sinc", "deg2rad", "rad2deg", "i0", "lgamma", "nan_to_num",
              "fix", "sgn", "positive"]:
        if f == "positive":
            continue  # identity: no compute
        t.append(U(f"torch.{f}"))
    for f in ["log", "log2", "log10", "log1p", "sqrt", "rsqrt", "reciprocal", "digamma"]:
        t.append(U(f"torch.{f}", domain="pos"))
    for f in ["asin", "acos", "atanh", "erfinv", "arcsin", "arccos", "arctanh"]:
        t.append(U(f"torch.{f}", domain="unit"))
    t.append(U("torch.acosh", domain="gt1"))
    t.append(U("torch.arccosh", domain="gt1"))
    for f in ["arctan", "arcsinh", "negative", "absolute"]:
        t.append(U(f"torch.{f}"))
    t.append(U("torch.logit", "torch.logit({x}, eps=1e-6)", domain="prob"))
    t.append(U("torch.clamp", "torch.clamp({x}, min={lo}, max={hi})"))
    t.append(U("torch.clamp_min", "torch.clamp_min({x}, {lo})"))
    t.append(U("torch.clamp_max", "torch.clamp_max({x}, {hi})"))
    t.append(U("torch.clip", "torch.clip({x}, {lo}, {hi})"))
    t.append(U("torch.pow", "torch.pow({x}, {p} + 1)", name="torch.pow/scalar"))
    t.append(U("torch.float_power", "torch.float_power({x}, 2).float()", domain="pos"))
    t.append(U("torch.mul", "torch.mul({x}, {scale})", name="torch.mul/scalar"))
    t.append(U("torch.add", "torch.add({x}, {alpha})", name="torch.add/scalar"))
    t.append(U("torch.div", "torch.div({x}, {scale})", name="torch.div/scalar"))
    t.append(U("torch.rsub", "torch.rsub({x}, {alpha})", name="torch.rsub/scalar"))
    t.append(U("torch.signbit", terminal=True, cat="compare"))
    for f in ["expit", "i0e", "i1", "i1e", "ndtr", "log_ndtr", "sinc", "bessel_j0", "bessel_j1",
              "modified_bessel_i0", "modified_bessel_i1", "spherical_bessel_j0", "airy_ai", "erfcx",
              "gammaln", "exp2", "expm1", "round", "erf", "erfc", "logit"]:
        if f in ("exp2", "expm1", "round", "erf", "erfc", "logit", "gammaln"):
            continue  # aliases of torch.* ops already in the table
        t.append(U(f"torch.special.{f}", cat="special"))
    for f in ["entr", "bessel_y0", "bessel_y1", "modified_bessel_k0", "modified_bessel_k1",
              "scaled_modified_bessel_k0", "scaled_modified_bessel_k1", "psi"]:
        t.append(U(f"torch.special.{f}", domain="pos", cat="special"))
    t.append(U("torch.special.ndtri", domain="prob", cat="special"))
    t.append(U("torch.special.polygamma", "torch.special.polygamma(1, {x})", domain="pos", cat="special"))
    t.append(U("torch.special.multigammaln", "torch.special.multigammaln({x}, 2)", domain="gt1",
               cat="special"))
    t.append(U("torch.special.softmax", "torch.special.softmax({x}, dim=-1)", cat="activation"))

    # --- activations: nn modules and functional forms ------------------------------------
    for cls, args in [("ReLU", ""), ("ReLU6", ""), ("LeakyReLU", "{negative_slope}"), ("ELU", "{alpha}"),
                      ("SELU", ""), ("CELU", "{alpha}"), ("GELU", ""), ("GELU", "approximate='tanh'"),
                      ("SiLU", ""), ("Mish", ""), ("Hardtanh", "{lo}, {hi}"), ("Hardswish", ""),
                      ("Hardsigmoid", ""), ("Hardshrink", "{lambd}"), ("Softshrink", "{lambd}"),
                      ("Tanhshrink", ""), ("Softplus", "beta={beta}"), ("Softsign", ""), ("Sigmoid", ""),
                      ("Tanh", ""), ("LogSigmoid", ""), ("Threshold", "0.1, 0.0"), ("GLU", "dim=-1"),
                      ("Softmax", "dim=-1"), ("LogSoftmax", "dim=-1"), ("Softmin", "dim=-1"),
                      ("Softmax", "dim=1"), ("LogSoftmax", "dim=1")]:
        kw = {"guard": (lambda s: s[-1] % 2 == 0)} if cls == "GLU" else {}
        t.append(M(cls, args, **kw))
    t.append(M("PReLU", "num_parameters={channels}", families=("img", "sig"), ranks=(3, 4, 5)))
    t.append(M("PReLU", "", name="nn.PReLU/shared"))
    t.append(M("Softmax2d", "", families=IMG, ranks=(4,)))
    for fn, args in [("relu", ""), ("relu6", ""), ("leaky_relu", "{negative_slope}"), ("elu", "{alpha}"),
                     ("selu", ""), ("celu", "{alpha}"), ("gelu", ""), ("gelu", "approximate='tanh'"),
                     ("silu", ""), ("mish", ""), ("hardtanh", "{lo}, {hi}"), ("hardswish", ""),
                     ("hardsigmoid", ""), ("hardshrink", "{lambd}"), ("softshrink", "{lambd}"),
                     ("tanhshrink", ""), ("softplus", "beta={beta}"), ("softsign", ""), ("sigmoid", ""),
                     ("tanh", ""), ("logsigmoid", ""), ("threshold", "0.1, 0.0"), ("glu", "dim=-1"),
                     ("softmax", "dim=-1"), ("log_softmax", "dim=-1"), ("softmin", "dim=-1"),
                     ("normalize", "p=2.0, dim=1"), ("elu", "alpha=1.0, inplace=False")]:
        if fn == "elu" and "inplace" in args:
            continue
        kw = {"guard": (lambda s: s[-1] % 2 == 0)} if fn == "glu" else {}
        t.append(FN(fn, args, **kw))
    t.append(OpSpec("F.prelu", "activation", "torch.nn.functional.prelu", "F.prelu({x}, {m})",
                    module="nn.Parameter(torch.full(({channels},), 0.25))", families=("img", "sig"),
                    ranks=(3, 4, 5)))
    t.append(U("torch.softmax", "torch.softmax({x}, dim=-1)", cat="activation"))
    t.append(U("torch.log_softmax", "torch.log_softmax({x}, dim=-1)", cat="activation"))

    # --- binary elementwise --------------------------------------------------------------
    for f in ["add", "sub", "mul", "maximum", "minimum", "fmax", "fmin", "atan2", "hypot", "copysign",
              "logaddexp", "logaddexp2", "arctan2", "multiply", "subtract"]:
        t.append(B(f"torch.{f}"))
    t.append(B("torch.div", kind="pos", name="torch.div/tensor"))
    t.append(B("torch.true_divide", kind="pos"))
    t.append(B("torch.remainder", kind="pos"))
    t.append(B("torch.fmod", kind="pos"))
    t.append(B("torch.pow", "torch.pow({x}, {y0})", kind="unit", domain="pos", name="torch.pow/tensor"))
    t.append(B("torch.xlogy", kind="pos"))
    t.append(B("torch.special.xlog1py", kind="pos"))
    t.append(B("torch.special.zeta", kind="pos", domain="gt1"))
    t.append(B("torch.special.gammainc", kind="pos", domain="pos"))
    t.append(B("torch.special.gammaincc", kind="pos", domain="pos"))
    t.append(B("torch.heaviside"))
    t.append(B("torch.lerp", "torch.lerp({x}, {y0}, 0.3)"))
    t.append(B("torch.where", "torch.where({x} > 0, {x}, {y0})"))
    t.append(B("torch.masked_fill", "{x}.masked_fill({y0}, 0.0)", kind="bool", cat="indexing"))
    t.append(B("torch.ldexp", "torch.ldexp({x}, {y0})", kind="int:4"))
    for f in ["gt", "lt", "ge", "le", "eq", "ne", "greater", "less"]:
        t.append(B(f"torch.{f}", terminal=True, cat="compare"))
    t.append(B("torch.isclose", "torch.isclose({x}, {y0}, rtol=0.1, atol=0.1)", terminal=True, cat="compare"))
    t.append(OpSpec("torch.addcmul", "binary", "torch.addcmul", "torch.addcmul({x}, {y0}, {y1}, value=0.5)",
                    extras=(Extra(SAME), Extra(SAME)), families=EW))
    t.append(OpSpec("torch.addcdiv", "binary", "torch.addcdiv", "torch.addcdiv({x}, {y0}, {y1}, value=0.5)",
                    extras=(Extra(SAME), Extra(SAME, "pos")), families=EW))
    t.append(OpSpec("bias_add/lastdim", "binary", "torch.add", "{x} + {m}",
                    module="nn.Parameter(torch.randn({in_features}) * 0.1)", families=EW))
    t.append(OpSpec("scale/channel", "binary", "torch.mul", "{x} * {m}",
                    module="nn.Parameter(torch.randn({channels}, 1, 1))", families=IMG, ranks=(4,)))
    t.append(OpSpec("bias_add/channel", "binary", "torch.add", "{x} + {m}",
                    module="nn.Parameter(torch.randn({channels}, 1, 1))", families=IMG, ranks=(4,)))
    t.append(B("F.mse_loss/none", "F.mse_loss({x}, {y0}, reduction='none')", cat="loss"))
    t.append(B("F.l1_loss/none", "F.l1_loss({x}, {y0}, reduction='none')", cat="loss"))
    t.append(B("F.smooth_l1_loss/none", "F.smooth_l1_loss({x}, {y0}, reduction='none')", cat="loss"))
    t.append(B("F.huber_loss/none", "F.huber_loss({x}, {y0}, reduction='none', delta=0.5)", cat="loss"))
    t.append(B("F.binary_cross_entropy_with_logits/none",
               "F.binary_cross_entropy_with_logits({x}, {y0}, reduction='none')", kind="prob", cat="loss"))
    t.append(B("F.soft_margin_loss/none", "F.soft_margin_loss({x}, {y0}, reduction='none')", kind="sign", cat="loss"))
    t.append(B("F.kl_div/none", "F.kl_div({x}, {y0}, reduction='none')", kind="prob", cat="loss"))
    t.append(B("F.poisson_nll_loss/none", "F.poisson_nll_loss({x}, {y0}, reduction='none')", kind="pos",
               cat="loss"))

    # --- reductions and scans ------------------------------------------------------------
    for f in ["sum", "mean", "amax", "amin", "std", "var", "logsumexp", "nansum", "nanmean"]:
        t.append(R(f"torch.{f}", f"torch.{f}({{x}}, dim={{dim}})"))
    t.append(R("torch.sum", "torch.sum({x}, dim=-1, keepdim=True)", name="torch.sum/keepdim"))
    t.append(R("torch.mean", "torch.mean({x}, dim=(2, 3))", name="torch.mean/spatial", families=IMG, ranks=(4,)))
    t.append(R("torch.prod", "torch.prod({x}, dim=-1)", guard=lambda s: s[-1] <= 64, families=("sqm",),
               domain="gt1"))
    t.append(R("torch.max", "torch.max({x}, dim={dim}).values"))
    t.append(R("torch.min", "torch.min({x}, dim={dim}).values"))
    t.append(R("torch.median", "torch.median({x}, dim=-1).values"))
    t.append(R("torch.nanmedian", "torch.nanmedian({x}, dim=-1).values"))
    t.append(R("torch.kthvalue", "torch.kthvalue({x}, {k}, dim=-1).values", guard=lambda s: s[-1] >= 16))
    t.append(R("torch.topk", "torch.topk({x}, {k}, dim=-1).values", guard=lambda s: s[-1] >= 16))
    t.append(R("torch.sort", "torch.sort({x}, dim=-1).values"))
    t.append(R("torch.msort", "torch.msort({x})"))
    t.append(R("torch.mode", "torch.mode({x}, dim=-1).values", guard=lambda s: s[-1] <= 4096))
    t.append(R("torch.quantile", "torch.quantile({x}, 0.75, dim=-1)", guard=lambda s: s[-1] <= 65536))
    t.append(R("torch.nanquantile", "torch.nanquantile({x}, 0.25, dim=-1)", guard=lambda s: s[-1] <= 65536))
    t.append(R("torch.norm", "torch.norm({x}, p=2, dim={dim})"))
    t.append(R("torch.linalg.vector_norm", "torch.linalg.vector_norm({x}, ord=3, dim=-1)"))
    t.append(R("torch.std_mean", "torch.std_mean({x}, dim=-1)[0] + torch.std_mean({x}, dim=-1)[1]"))
    t.append(R("torch.var_mean", "torch.var_mean({x}, dim=-1)[0]"))
    t.append(R("torch.aminmax", "torch.aminmax({x}, dim=-1).max"))
    t.append(R("torch.argmax", "torch.argmax({x}, dim={dim})", terminal=True))
    t.append(R("torch.argmin", "torch.argmin({x}, dim={dim})", terminal=True))
    t.append(R("torch.argsort", "torch.argsort({x}, dim=-1)", terminal=True, guard=lambda s: s[-1] <= 65536))
    t.append(R("torch.count_nonzero", "torch.count_nonzero({x} > 0.5, dim=-1)", terminal=True))
    t.append(R("torch.all", "torch.all({x} > -2.0, dim=-1)", terminal=True))
    t.append(R("torch.any", "torch.any({x} > 2.0, dim=-1)", terminal=True))
    t.append(R("torch.histc", "torch.histc({x}, bins=128, min=-3.0, max=3.0)", terminal=True))
    t.append(R("torch.renorm", "torch.renorm({x}, p=2, dim=0, maxnorm=5.0)"))
    t.append(R("torch.diff", "torch.diff({x}, dim=-1)"))
    t.append(R("torch.trapezoid", "torch.trapezoid({x}, dim=-1)"))
    for f in ["cumsum", "logcumsumexp"]:
        t.append(R(f"torch.{f}", f"torch.{f}({{x}}, dim={{dim}})", cat="scan"))
    t.append(R("torch.cumprod", "torch.cumprod({x}, dim=-1)", cat="scan", domain="pos",
               guard=lambda s: s[-1] <= 64, families=("sqm",)))
    t.append(R("torch.cummax", "torch.cummax({x}, dim={dim}).values", cat="scan"))
    t.append(R("torch.cummin", "torch.cummin({x}, dim={dim}).values", cat="scan"))
    t.append(R("torch.cumulative_trapezoid", "torch.cumulative_trapezoid({x}, dim=-1)", cat="scan"))
    t.append(R("torch.special.logsumexp", "torch.special.logsumexp({x}, dim=-1)"))

    # --- matmul family -------------------------------------------------------------------
    OUTF = {"n_out": lambda s, r: max(16, min(8192, r.choice([s[-1] // 2, s[-1], 2 * s[-1]])))}
    W = lambda s, p: (s[-1], p["n_out"])  # noqa: E731
    fits = _fits(8192)
    t.append(OpSpec("torch.matmul", "matmul", "torch.matmul", "torch.matmul({x}, {y0})", params=OUTF,
                    extras=(Extra(W),), families=("dense", "mat", "seq"), guard=fits))
    t.append(OpSpec("torch.matmul/nt", "matmul", "torch.matmul", "torch.matmul({x}, {y0}.transpose(-1, -2))",
                    params=OUTF, extras=(Extra(lambda s, p: (p["n_out"], s[-1])),),
                    families=("dense", "mat"), guard=fits))
    t.append(OpSpec("torch.mm", "matmul", "torch.mm", "torch.mm({x}, {y0})", params=OUTF, extras=(Extra(W),),
                    families=("dense",), ranks=(2,), guard=fits))
    t.append(OpSpec("torch.addmm", "matmul", "torch.addmm", "torch.addmm({m}, {x}, {y0})", params=OUTF,
                    module="nn.Parameter(torch.randn({n_out}) * 0.1)", extras=(Extra(W),),
                    families=("dense",), ranks=(2,), guard=fits))
    t.append(OpSpec("torch.mv", "matmul", "torch.mv", "torch.mv({x}, {y0})", extras=(Extra(LAST),),
                    families=("dense",), ranks=(2,), guard=fits, terminal=True))
    t.append(OpSpec("torch.addmv", "matmul", "torch.addmv", "torch.addmv({y1}, {x}, {y0})",
                    extras=(Extra(LAST), Extra(ROWS)), families=("dense",), ranks=(2,), guard=fits, terminal=True))
    BW = lambda s, p: (s[0], s[-1], p["n_out"])  # noqa: E731
    t.append(OpSpec("torch.bmm", "matmul", "torch.bmm", "torch.bmm({x}, {y0})", params=OUTF,
                    extras=(Extra(BW),), families=("mat", "seq"), ranks=(3,), guard=fits))
    t.append(OpSpec("torch.baddbmm", "matmul", "torch.baddbmm", "torch.baddbmm({y1}, {x}, {y0}, beta=0.5)",
                    params=OUTF, extras=(Extra(BW), Extra(lambda s, p: (s[0], s[1], p["n_out"]))),
                    families=("mat",), ranks=(3,), guard=fits))
    t.append(OpSpec("torch.addbmm", "matmul", "torch.addbmm", "torch.addbmm({y1}, {x}, {y0})",
                    params=OUTF, extras=(Extra(BW), Extra(lambda s, p: (s[1], p["n_out"]))),
                    families=("mat",), ranks=(3,), guard=fits))
    t.append(OpSpec("torch.einsum/bmk,kn", "matmul", "torch.einsum", "torch.einsum('bmk,kn->bmn', {x}, {y0})",
                    params=OUTF, extras=(Extra(W),), families=("mat", "seq"), ranks=(3,), guard=fits))
    t.append(OpSpec("torch.einsum/bmk,bnk", "matmul", "torch.einsum",
                    "torch.einsum('bmk,bnk->bmn', {x}, {y0})", params=OUTF,
                    extras=(Extra(lambda s, p: (s[0], p["n_out"], s[-1])),), families=("mat",), ranks=(3,),
                    guard=fits))
    t.append(OpSpec("torch.einsum/rowdot", "matmul", "torch.einsum", "torch.einsum('bi,bi->b', {x}, {y0})",
                    extras=(Extra(SAME),), families=("dense",), ranks=(2,), terminal=True))
    t.append(OpSpec("torch.tensordot", "matmul", "torch.tensordot", "torch.tensordot({x}, {y0}, dims=1)",
                    params=OUTF, extras=(Extra(W),), families=("dense", "mat"), guard=fits))
    t.append(OpSpec("torch.inner", "matmul", "torch.inner", "torch.inner({x}, {y0})", params=OUTF,
                    extras=(Extra(lambda s, p: (p["n_out"], s[-1])),), families=("dense",), ranks=(2,), guard=fits))
    t.append(OpSpec("torch.linalg.multi_dot", "matmul", "torch.linalg.multi_dot",
                    "torch.linalg.multi_dot([{x}, {y0}, {y1}])", params=OUTF,
                    extras=(Extra(W), Extra(lambda s, p: (p["n_out"], s[-1]))), families=("dense",), ranks=(2,),
                    guard=fits))
    t.append(OpSpec("torch.outer", "matmul", "torch.outer", "torch.outer({x}.mean(dim=0), {y0})",
                    extras=(Extra(lambda s, p: (1024,)),), families=("dense",), ranks=(2,), guard=_fits(4096),
                    terminal=True))
    for bias in ("True", "False"):
        t.append(M("Linear", f"{{in_features}}, {{out_features}}, bias={bias}", cat="matmul",
                   families=DENSE, guard=fits))
    t.append(OpSpec("F.linear", "matmul", "torch.nn.functional.linear", "F.linear({x}, {m})",
                    module="nn.Parameter(torch.randn({out_features}, {in_features}) * 0.02)", families=DENSE,
                    guard=fits))
    t.append(OpSpec("nn.Bilinear", "matmul", "torch.nn.Bilinear", "{m}({x}, {y0})",
                    module="nn.Bilinear({in_features}, {in_features}, 256)", extras=(Extra(SAME),),
                    families=("dense",), ranks=(2,), guard=_fits(1024)))
    t.append(OpSpec("F.bilinear", "matmul", "torch.nn.functional.bilinear", "F.bilinear({x}, {y0}, {m})",
                    module="nn.Parameter(torch.randn(128, {in_features}, {in_features}) * 0.02)",
                    extras=(Extra(SAME),), families=("dense",), ranks=(2,), guard=_fits(1024)))

    # --- linear algebra on batches of small matrices --------------------------------------
    SQ = ("sqm",)
    sq = lambda s: len(s) >= 2 and s[-1] == s[-2] and s[-1] <= 128  # noqa: E731
    SPD = "({x} @ {x}.transpose(-1, -2) + {x}.shape[-1] * torch.eye({x}.shape[-1], device={x}.device))"
    for name, expr in [("torch.linalg.inv", "torch.linalg.inv(" + SPD + ")"),
                       ("torch.linalg.det", "torch.linalg.det({x})"),
                       ("torch.linalg.slogdet", "torch.linalg.slogdet({x}).logabsdet"),
                       ("torch.linalg.cholesky", "torch.linalg.cholesky(" + SPD + ")"),
                       ("torch.linalg.eigvalsh", "torch.linalg.eigvalsh(" + SPD + ")"),
                       ("torch.linalg.svdvals", "torch.linalg.svdvals({x})"),
                       ("torch.linalg.matrix_exp", "torch.linalg.matrix_exp({x} * 0.1)"),
                       ("torch.linalg.matrix_norm", "torch.linalg.matrix_norm({x})"),
                       ("torch.linalg.matrix_power", "torch.linalg.matrix_power({x}, 3)"),
                       ("torch.linalg.pinv", "torch.linalg.pinv(" + SPD + ")"),
                       ("torch.linalg.qr", "torch.linalg.qr(" + SPD + ").R.abs()"),
                       ("torch.logdet", "torch.logdet(" + SPD + ")"),
                       ("torch.linalg.cond", "torch.linalg.cond(" + SPD + ")"),
                       ("torch.linalg.solve_triangular",
                        "torch.linalg.solve_triangular(torch.triu({x}) + {x}.shape[-1] * "
                        "torch.eye({x}.shape[-1], device={x}.device), {y0}, upper=True)"),
                       ("torch.trace", "torch.diagonal({x}, dim1=-2, dim2=-1).sum(-1)"),
                       ("torch.triu", "torch.triu({x})"), ("torch.tril", "torch.tril({x}, diagonal=-1)"),
                       ("torch.diag_embed", "torch.diag_embed(torch.diagonal({x}, dim1=-2, dim2=-1))")]:
        extras = (Extra(SAME),) if "{y0}" in expr else ()
        t.append(OpSpec(name, "linalg", name if name != "torch.trace" else "torch.diagonal", expr, families=SQ,
                        guard=sq, extras=extras))
    t.append(OpSpec("torch.linalg.solve", "linalg", "torch.linalg.solve", "torch.linalg.solve(" + SPD + ", {y0})",
                    extras=(Extra(SAME),), families=SQ, guard=sq))
    t.append(OpSpec("torch.cholesky_solve", "linalg", "torch.cholesky_solve",
                    "torch.cholesky_solve({y0}, torch.linalg.cholesky(" + SPD + "))",
                    extras=(Extra(SAME),), families=SQ, guard=sq))

    # --- convolutions ----------------------------------------------------------------------
    for d, fam, rk, sp in [(1, SIG, 3, _spatial(16)), (2, IMG, 4, _spatial(8)), (3, VOL, 5, _spatial(8, 128))]:
        C = f"Conv{d}d"
        for args, tag in [("{in_channels}, {out_channels}, {kernel_size}, padding=1", ""),
                          ("{in_channels}, {out_channels}, 3, stride=2", "s2"),
                          ("{in_channels}, {out_channels}, 1", "k1"),
                          ("{in_channels}, {in_channels}, 3, padding=1, groups={in_channels}", "depthwise"),
                          ("{in_channels}, {out_channels}, 3, dilation=2, padding=2", "dil2"),
                          ("{in_channels}, {out_channels}, 3, padding=1, bias=False", "nobias"),
                          ("{in_channels}, {out_channels}, 3, padding=1, padding_mode='reflect'", "reflect"),
                          ("{in_channels}, {out_channels}, 3, padding=1, padding_mode='circular'", "circular")]:
            if d == 3 and tag in ("dil2", "reflect", "circular"):
                continue
            t.append(M(C, args, cat="conv", name=f"nn.{C}" + (f"/{tag}" if tag else ""), families=fam,
                       ranks=(rk,), guard=sp))
        if d == 2:
            t.append(M(C, "{in_channels}, {out_channels}, (3, 5), padding=(1, 2)", cat="conv",
                       name="nn.Conv2d/3x5", families=fam, ranks=(rk,), guard=sp))
            t.append(M(C, "{in_channels}, {out_channels}, 3, padding=1, groups={num_groups}", cat="conv",
                       name="nn.Conv2d/grouped", families=fam, ranks=(rk,), guard=sp,
                       params={"out_channels": lambda s, r: s[1] * r.choice([1, 2])}))
        T = f"ConvTranspose{d}d"
        for args, tag in [("{in_channels}, {out_channels}, 4, stride=2, padding=1", ""),
                          ("{in_channels}, {out_channels}, 3, padding=1", "s1"),
                          ("{in_channels}, {out_channels}, 2, stride=2", "k2s2"),
                          ("{in_channels}, {out_channels}, 3, stride=2, padding=1, output_padding=1", "outpad")]:
            t.append(M(T, args, cat="conv", name=f"nn.{T}" + (f"/{tag}" if tag else ""), families=fam,
                       ranks=(rk,), guard=sp))
        ks = ", ".join(["3"] * d)
        t.append(OpSpec(f"F.conv{d}d", "conv", f"torch.nn.functional.conv{d}d", f"F.conv{d}d({{x}}, {{m}}, padding=1)",
                        module=f"nn.Parameter(torch.randn({{out_channels}}, {{in_channels}}, {ks}) * 0.05)",
                        families=fam, ranks=(rk,), guard=sp))
        t.append(OpSpec(f"F.conv_transpose{d}d", "conv", f"torch.nn.functional.conv_transpose{d}d",
                        f"F.conv_transpose{d}d({{x}}, {{m}}, stride=2, padding=1)",
                        module=f"nn.Parameter(torch.randn({{in_channels}}, {{out_channels}}, {ks}) * 0.05)",
                        families=fam, ranks=(rk,), guard=sp))
    t.append(M("Unfold", "kernel_size=3, padding=1", cat="conv", families=IMG, ranks=(4,),
               guard=lambda s: s[1] <= 64 and s[2] * s[3] <= 65536))
    t.append(OpSpec("F.unfold", "conv", "torch.nn.functional.unfold", "F.unfold({x}, kernel_size=2, stride=2)",
                    families=IMG, ranks=(4,), guard=_spatial(8)))
    t.append(OpSpec("F.fold", "conv", "torch.nn.functional.fold",
                    "F.fold(F.unfold({x}, kernel_size=2, stride=2) * 2.0, ({height}, {width}), kernel_size=2, stride=2)",
                    families=IMG, ranks=(4,), guard=lambda s: s[2] % 2 == 0 and s[3] % 2 == 0,
                    params={"height": lambda s, r: s[-2], "width": lambda s, r: s[-1]}))
    t.append(OpSpec("nn.Fold", "conv", "torch.nn.Fold",
                    "{m}(F.unfold({x}, kernel_size=3, padding=1))",
                    module="nn.Fold(({height}, {width}), kernel_size=3, padding=1)",
                    families=IMG, ranks=(4,), guard=lambda s: s[1] <= 64,
                    params={"height": lambda s, r: s[-2], "width": lambda s, r: s[-1]}))

    # --- pooling ---------------------------------------------------------------------------
    for d, fam, rk in [(1, SIG, 3), (2, IMG, 4), (3, VOL, 5)]:
        g = _spatial(4, 100000)
        for cls, args, tag in [("MaxPool", "{pool_size}", ""), ("MaxPool", "3, stride=1, padding=1", "s1"),
                               ("AvgPool", "{pool_size}", ""), ("AvgPool", "3, stride=2, padding=1, count_include_pad=False", "nopad"),
                               ("LPPool", "2, 2", ""), ("AdaptiveAvgPool", "{out_size}", ""),
                               ("AdaptiveMaxPool", "{out_size}", "")]:
            t.append(M(f"{cls}{d}d", args, cat="pooling", name=f"nn.{cls}{d}d" + (f"/{tag}" if tag else ""),
                       families=fam, ranks=(rk,), guard=g))
        for fn, args in [("max_pool", "2"), ("avg_pool", "2"), ("lp_pool", "2.0, 2"),
                         ("adaptive_avg_pool", "1"), ("adaptive_max_pool", "4")]:
            t.append(FN(f"{fn}{d}d", args, cat="pooling", families=fam, ranks=(rk,), guard=g))
        t.append(OpSpec(f"F.max_unpool{d}d", "pooling", f"torch.nn.functional.max_unpool{d}d",
                        f"F.max_unpool{d}d(*F.max_pool{d}d({{x}}, 2, return_indices=True), 2)",
                        families=fam, ranks=(rk,), guard=lambda s: all(v % 2 == 0 for v in s[2:])))
        t.append(OpSpec(f"nn.MaxUnpool{d}d", "pooling", f"torch.nn.MaxUnpool{d}d",
                        f"{{m}}(*F.max_pool{d}d({{x}}, 2, return_indices=True))", module=f"nn.MaxUnpool{d}d(2)",
                        families=fam, ranks=(rk,), guard=lambda s: all(v % 2 == 0 for v in s[2:])))

    # --- normalization ---------------------------------------------------------------------
    for d, fam, rk in [(1, ("dense", "sig"), (2, 3)), (2, IMG, (4,)), (3, VOL, (5,))]:
        t.append(M(f"BatchNorm{d}d", "{num_features}", cat="normalization", families=fam, ranks=rk))
        t.append(M(f"BatchNorm{d}d", "{num_features}, affine=False", cat="normalization",
                   name=f"nn.BatchNorm{d}d/noaffine", families=fam, ranks=rk))
        t.append(M(f"InstanceNorm{d}d", "{num_features}", cat="normalization",
                   families=fam if d > 1 else SIG, ranks=(rk[-1],)))
        t.append(M(f"InstanceNorm{d}d", "{num_features}, affine=True", cat="normalization",
                   name=f"nn.InstanceNorm{d}d/affine", families=fam if d > 1 else SIG, ranks=(rk[-1],)))
    t.append(M("LayerNorm", "{normalized_shape}", cat="normalization", families=("seq", "dense", "vec")))
    t.append(M("LayerNorm", "{normalized_shape}, elementwise_affine=False", cat="normalization",
               name="nn.LayerNorm/noaffine", families=("seq", "dense")))
    t.append(M("LayerNorm", "({channels}, {height}, {width})", cat="normalization", name="nn.LayerNorm/chw",
               families=IMG, ranks=(4,), guard=lambda s: s[1] * s[2] * s[3] <= 2 ** 22,
               params={"height": lambda s, r: s[-2], "width": lambda s, r: s[-1]}))
    t.append(M("RMSNorm", "{normalized_shape}", cat="normalization", families=("seq", "dense")))
    t.append(M("RMSNorm", "{normalized_shape}, eps={eps}, elementwise_affine=False", cat="normalization",
               name="nn.RMSNorm/noaffine", families=("seq", "dense")))
    t.append(M("GroupNorm", "{num_groups}, {num_channels}", cat="normalization", families=("img", "sig", "vol"),
               ranks=(3, 4, 5)))
    t.append(M("LocalResponseNorm", "{pool_size}", cat="normalization", families=("img", "sig"), ranks=(3, 4, 5)))
    t.append(M("CrossMapLRN2d", "3", cat="normalization", families=IMG, ranks=(4,)))
    for fn, args, fam, rk in [("layer_norm", "({normalized_shape},)", ("seq", "dense"), None),
                              ("rms_norm", "({normalized_shape},)", ("seq", "dense"), None),
                              ("group_norm", "{num_groups}", IMG, (3, 4, 5)),
                              ("instance_norm", "", IMG, (3, 4, 5)),
                              ("batch_norm", "None, None, training=True", IMG, (2, 3, 4, 5)),
                              ("local_response_norm", "3", IMG, (3, 4, 5))]:
        t.append(FN(fn, args, cat="normalization", families=fam, ranks=rk))
    t.append(FN("normalize", "p=2.0, dim=-1", cat="normalization", name="F.normalize/last"))

    # --- losses (scalar outputs) -----------------------------------------------------------
    CLS = ("dense",)
    small = _fits(32768)
    for cls, kind, pre, args in [("L1Loss", "randn", "", ""), ("MSELoss", "randn", "", ""),
                                 ("SmoothL1Loss", "randn", "", ""), ("HuberLoss", "randn", "", "delta=0.5"),
                                 ("KLDivLoss", "prob", "F.log_softmax({x}, dim=-1)", "reduction='batchmean'"),
                                 ("BCELoss", "prob", "torch.sigmoid({x})", ""),
                                 ("BCEWithLogitsLoss", "prob", "", ""), ("SoftMarginLoss", "sign", "", ""),
                                 ("MultiLabelSoftMarginLoss", "binary", "", ""),
                                 ("HingeEmbeddingLoss", "sign", "", ""),
                                 ("PoissonNLLLoss", "pos", "", ""),
                                 ("SmoothL1Loss", "randn", "", "beta=0.5")]:
        if cls == "SmoothL1Loss" and args:
            continue
        t.append(OpSpec(f"nn.{cls}", "loss", f"torch.nn.{cls}", "{m}(" + (pre or "{x}") + ", {y0})",
                        module=f"nn.{cls}({args})", extras=(Extra(SAME, kind),), families=CLS, terminal=True,
                        guard=small))
    INT_T = Extra(ROWS, "int:dim1")
    t.append(OpSpec("nn.CrossEntropyLoss", "loss", "torch.nn.CrossEntropyLoss", "{m}({x}, {y0})",
                    module="nn.CrossEntropyLoss()", extras=(INT_T,), families=CLS, ranks=(2,), terminal=True,
                    guard=small))
    t.append(OpSpec("nn.CrossEntropyLoss/smooth", "loss", "torch.nn.CrossEntropyLoss", "{m}({x}, {y0})",
                    module="nn.CrossEntropyLoss(label_smoothing=0.1)", extras=(INT_T,), families=CLS, ranks=(2,),
                    terminal=True, guard=small))
    t.append(OpSpec("nn.NLLLoss", "loss", "torch.nn.NLLLoss", "{m}(F.log_softmax({x}, dim=1), {y0})",
                    module="nn.NLLLoss()", extras=(INT_T,), families=CLS, ranks=(2,), terminal=True, guard=small))
    t.append(OpSpec("nn.MultiMarginLoss", "loss", "torch.nn.MultiMarginLoss", "{m}({x}, {y0})",
                    module="nn.MultiMarginLoss()", extras=(INT_T,), families=CLS, ranks=(2,), terminal=True,
                    guard=small))
    t.append(OpSpec("nn.GaussianNLLLoss", "loss", "torch.nn.GaussianNLLLoss", "{m}({x}, {y0}, {y1})",
                    module="nn.GaussianNLLLoss()", extras=(Extra(SAME), Extra(SAME, "pos")), families=CLS,
                    terminal=True))
    t.append(OpSpec("nn.CosineEmbeddingLoss", "loss", "torch.nn.CosineEmbeddingLoss", "{m}({x}, {y0}, {y1})",
                    module="nn.CosineEmbeddingLoss()", extras=(Extra(SAME), Extra(ROWS, "sign")), families=CLS,
                    ranks=(2,), terminal=True))
    t.append(OpSpec("nn.MarginRankingLoss", "loss", "torch.nn.MarginRankingLoss", "{m}({x}, {y0}, {y1})",
                    module="nn.MarginRankingLoss(margin=0.1)", extras=(Extra(SAME), Extra(SAME, "sign")),
                    families=CLS, terminal=True))
    for cls in ["TripletMarginLoss", "TripletMarginWithDistanceLoss"]:
        t.append(OpSpec(f"nn.{cls}", "loss", f"torch.nn.{cls}", "{m}({x}, {y0}, {y1})", module=f"nn.{cls}()",
                        extras=(Extra(SAME), Extra(SAME)), families=CLS, ranks=(2,), terminal=True))
    for fn, kind, extra in [("mse_loss", "randn", ""), ("l1_loss", "randn", ""), ("smooth_l1_loss", "randn", ""),
                            ("huber_loss", "randn", ""), ("binary_cross_entropy_with_logits", "prob", ""),
                            ("soft_margin_loss", "sign", ""), ("hinge_embedding_loss", "sign", ""),
                            ("multilabel_soft_margin_loss", "binary", ""),
                            ("kl_div", "prob", ", reduction='batchmean'"),
                            ("poisson_nll_loss", "pos", "")]:
        t.append(OpSpec(f"F.{fn}", "loss", f"torch.nn.functional.{fn}", f"F.{fn}({{x}}, {{y0}}{extra})",
                        extras=(Extra(SAME, kind),), families=CLS, terminal=True, guard=small))
    t.append(OpSpec("F.binary_cross_entropy", "loss", "torch.nn.functional.binary_cross_entropy",
                    "F.binary_cross_entropy(torch.sigmoid({x}), {y0})", extras=(Extra(SAME, "prob"),),
                    families=CLS, terminal=True, guard=small))
    t.append(OpSpec("F.cross_entropy", "loss", "torch.nn.functional.cross_entropy", "F.cross_entropy({x}, {y0})",
                    extras=(INT_T,), families=CLS, ranks=(2,), terminal=True, guard=small))
    t.append(OpSpec("F.nll_loss", "loss", "torch.nn.functional.nll_loss",
                    "F.nll_loss(F.log_softmax({x}, dim=1), {y0})", extras=(INT_T,), families=CLS, ranks=(2,),
                    terminal=True, guard=small))
    t.append(OpSpec("F.multi_margin_loss", "loss", "torch.nn.functional.multi_margin_loss",
                    "F.multi_margin_loss({x}, {y0})", extras=(INT_T,), families=CLS, ranks=(2,), terminal=True,
                    guard=small))
    t.append(OpSpec("F.triplet_margin_loss", "loss", "torch.nn.functional.triplet_margin_loss",
                    "F.triplet_margin_loss({x}, {y0}, {y1})", extras=(Extra(SAME), Extra(SAME)), families=CLS,
                    ranks=(2,), terminal=True))
    t.append(OpSpec("F.cosine_embedding_loss", "loss", "torch.nn.functional.cosine_embedding_loss",
                    "F.cosine_embedding_loss({x}, {y0}, {y1})", extras=(Extra(SAME), Extra(ROWS, "sign")),
                    families=CLS, ranks=(2,), terminal=True))
    t.append(OpSpec("F.margin_ranking_loss", "loss", "torch.nn.functional.margin_ranking_loss",
                    "F.margin_ranking_loss({x}, {y0}, {y1})", extras=(Extra(SAME), Extra(SAME, "sign")),
                    families=CLS, terminal=True))
    t.append(OpSpec("F.gaussian_nll_loss", "loss", "torch.nn.functional.gaussian_nll_loss",
                    "F.gaussian_nll_loss({x}, {y0}, {y1})", extras=(Extra(SAME), Extra(SAME, "pos")),
                    families=CLS, terminal=True))

    # --- indexing / gather-scatter -----------------------------------------------------------
    IDX = lambda s, p: s[:-1] + (max(1, s[-1] // 2),)  # noqa: E731
    t.append(OpSpec("torch.gather", "indexing", "torch.gather", "torch.gather({x}, -1, {y0})",
                    extras=(Extra(IDX, "int:last"),), families=EW))
    t.append(OpSpec("torch.take_along_dim", "indexing", "torch.take_along_dim", "torch.take_along_dim({x}, {y0}, dim=-1)",
                    extras=(Extra(IDX, "int:last"),), families=EW))
    t.append(OpSpec("torch.index_select", "indexing", "torch.index_select", "torch.index_select({x}, -1, {y0})",
                    extras=(Extra(lambda s, p: (max(1, s[-1] // 2),), "int:last"),), families=EW))
    t.append(OpSpec("torch.scatter_add", "indexing", "torch.scatter_add", "torch.scatter_add({x}, -1, {y0}, {y1})",
                    extras=(Extra(IDX, "int:last"), Extra(IDX)), families=EW))
    t.append(OpSpec("torch.scatter_reduce", "indexing", "torch.scatter_reduce",
                    "torch.scatter_reduce({x}, -1, {y0}, {y1}, reduce='amax')",
                    extras=(Extra(IDX, "int:last"), Extra(IDX)), families=EW))
    t.append(OpSpec("torch.index_add", "indexing", "torch.index_add", "torch.index_add({x}, 0, {y0}, {y1})",
                    extras=(Extra(lambda s, p: (max(1, s[0] // 2),), "perm:first"),
                            Extra(lambda s, p: (max(1, s[0] // 2),) + s[1:])), families=EW))
    t.append(OpSpec("torch.index_fill", "indexing", "torch.index_fill", "torch.index_fill({x}, -1, {y0}, 0.0)",
                    extras=(Extra(lambda s, p: (max(1, s[-1] // 4),), "int:last"),), families=EW))
    t.append(OpSpec("torch.take", "indexing", "torch.take", "torch.take({x}, {y0})",
                    extras=(Extra(lambda s, p: (s[0], 1024), "int:numel"),), families=EW))
    t.append(OpSpec("torch.where/mask", "indexing", "torch.where",
                    "torch.where({y0}, {x}, torch.zeros_like({x}))", extras=(Extra(SAME, "bool"),), families=EW))
    t.append(OpSpec("torch.bucketize", "indexing", "torch.bucketize",
                    "torch.bucketize({x}, torch.linspace(-2.0, 2.0, 16, device={x}.device))", terminal=True,
                    families=EW))
    t.append(OpSpec("torch.searchsorted", "indexing", "torch.searchsorted",
                    "torch.searchsorted(torch.sort({y0}, dim=-1).values, {x})", terminal=True,
                    extras=(Extra(lambda s, p: s[:-1] + (64,)),), families=("dense", "seq")))
    for cls, args in [("Embedding", "{num_embeddings}, {embedding_dim}"),
                      ("EmbeddingBag", "{num_embeddings}, {embedding_dim}, mode='mean'")]:
        t.append(OpSpec(f"nn.{cls}", "indexing", f"torch.nn.{cls}", "{m}({x})", module=f"nn.{cls}({args})",
                        families=("tok",), domain="tokens"))
    t.append(OpSpec("F.embedding", "indexing", "torch.nn.functional.embedding", "F.embedding({x}, {m})",
                    module="nn.Parameter(torch.randn({num_embeddings}, {embedding_dim}))", families=("tok",),
                    domain="tokens"))
    t.append(OpSpec("F.embedding_bag", "indexing", "torch.nn.functional.embedding_bag",
                    "F.embedding_bag({x}, {m}, mode='sum')",
                    module="nn.Parameter(torch.randn({num_embeddings}, {embedding_dim}))", families=("tok",),
                    domain="tokens"))
    t.append(OpSpec("F.one_hot", "indexing", "torch.nn.functional.one_hot", "F.one_hot({x}, 1000).float().sum(1)",
                    families=("tok",), domain="tokens", terminal=True, params={"num_embeddings": lambda s, r: 1000}))

    # --- shape / data movement --------------------------------------------------------------
    for name, expr, fam, rk in [
            ("torch.flip", "torch.flip({x}, dims=[-1])", EW, None),
            ("torch.roll", "torch.roll({x}, shifts={pad}, dims=-1)", EW, None),
            ("torch.rot90", "torch.rot90({x}, 1, dims=(-2, -1))", ("img", "seq"), (3, 4, 5)),
            ("torch.transpose", "torch.transpose({x}, -1, -2).contiguous()", ("seq", "img", "dense"), (2, 3, 4, 5)),
            ("torch.permute", "{x}.permute(0, 2, 3, 1).contiguous()", IMG, (4,)),
            ("torch.movedim", "torch.movedim({x}, 1, -1).contiguous()", ("img", "seq"), (3, 4, 5)),
            ("torch.repeat_interleave", "torch.repeat_interleave({x}, 2, dim=-1)", EW, None),
            ("torch.tile", "torch.tile({x}, (1, 2))", EW, None),
            ("torch.Tensor.repeat", "{x}.repeat(1, 2)", ("dense", "vec"), (2,)),
            ("torch.cat", "torch.cat([{x}, {y0}], dim=-1)", EW, None),
            ("torch.stack", "torch.stack([{x}, {y0}], dim=1).flatten(1, 2)", EW, None),
            ("torch.narrow", "torch.narrow({x}, -1, 1, {x}.shape[-1] // 2).contiguous()", EW, None),
            ("torch.chunk", "torch.chunk({x}, 2, dim=-1)[0] * torch.chunk({x}, 2, dim=-1)[1]", EW, None),
            ("torch.split", "torch.split({x}, {x}.shape[1] // 2, dim=1)[1].contiguous()", EW, None),
            ("torch.flatten", "torch.flatten({x}, 1)", ("img", "seq"), (3, 4, 5)),
            ("torch.diagonal", "torch.diagonal({x}, dim1=-2, dim2=-1).contiguous()", ("img", "mat"), (3, 4)),
            ("torch.fft.fftshift", "torch.fft.fftshift({x}, dim=(-2, -1))", ("img",), (4,)),
            ("torch.cross", "torch.linalg.cross({x}[..., :{x}.shape[-1] // 3 * 3].unflatten(-1, (-1, 3)), "
             "{y0}[..., :{x}.shape[-1] // 3 * 3].unflatten(-1, (-1, 3))).flatten(-2)",
             ("seq",), (3,)),
            ("torch.cov", "torch.cov({x})", ("dense",), (2,)),
            ("torch.corrcoef", "torch.corrcoef({x})", ("dense",), (2,)),
            ("torch.cdist", "torch.cdist({x}, {y0})", ("mat",), (3,)),
            ("torch.nn.functional.pdist", "F.pdist({x})", ("dense",), (2,)),
            ("torch.nn.functional.pairwise_distance", "F.pairwise_distance({x}, {y0})", ("dense", "seq"), None),
            ("torch.nn.functional.cosine_similarity", "F.cosine_similarity({x}, {y0}, dim=-1)", ("dense", "seq"), None),
            ("torch.cosine_similarity", "torch.cosine_similarity({x}, {y0}, dim=1)", ("dense", "img"), None),
            ("torch.dist", "torch.dist({x}, {y0})", ("dense",), None)]:
        extras = (Extra(SAME),) if "{y0}" in expr else ()
        cat = "distance" if any(k in name for k in ("dist", "cosine", "cov", "corrcoef", "cross")) else "shape"
        g = None
        if name in ("torch.cov", "torch.corrcoef", "torch.nn.functional.pdist"):
            g = lambda s: s[0] <= 4096  # noqa: E731
        elif name == "torch.cdist":
            g = lambda s: s[1] <= 2048  # noqa: E731
        elif name == "torch.stack" or name == "torch.Tensor.repeat" or name == "torch.tile":
            g = None
        t.append(OpSpec(name.replace("torch.nn.functional.", "F."), cat, name, expr, extras=extras, families=fam,
                        ranks=rk, guard=g, terminal=name in ("torch.dist",)))
    for cls, args, tag, fam, rk in [("PairwiseDistance", "", "", ("dense",), None),
                                    ("CosineSimilarity", "dim=1", "", ("dense", "img"), None)]:
        t.append(OpSpec(f"nn.{cls}", "distance", f"torch.nn.{cls}", "{m}({x}, {y0})", module=f"nn.{cls}({args})",
                        extras=(Extra(SAME),), families=fam, ranks=rk))
    t.append(M("Flatten", "", cat="shape", families=("img", "seq"), ranks=(3, 4, 5)))
    t.append(OpSpec("nn.Unflatten", "shape", "torch.nn.Unflatten", "{m}({x}).transpose(1, 2).flatten(1)",
                    module="nn.Unflatten(1, (2, -1))", families=("dense", "vec"), ranks=(2,),
                    guard=lambda s: s[1] % 2 == 0))
    t.append(M("PixelShuffle", "2", cat="shape", families=IMG, ranks=(4,), guard=lambda s: s[1] % 4 == 0))
    t.append(M("PixelUnshuffle", "2", cat="shape", families=IMG, ranks=(4,),
               guard=lambda s: s[2] % 2 == 0 and s[3] % 2 == 0))
    t.append(M("ChannelShuffle", "{num_groups}", cat="shape", families=IMG, ranks=(4,)))
    t.append(FN("pixel_shuffle", "2", cat="shape", families=IMG, ranks=(4,), guard=lambda s: s[1] % 4 == 0))
    t.append(FN("pixel_unshuffle", "2", cat="shape", families=IMG, ranks=(4,),
                guard=lambda s: s[2] % 2 == 0 and s[3] % 2 == 0))
    t.append(FN("channel_shuffle", "{num_groups}", cat="shape", families=IMG, ranks=(4,),
                expr="F.channel_shuffle({x}, {num_groups})"))
    # padding
    for d, fam, rk in [(1, SIG, (3,)), (2, IMG, (4,)), (3, VOL, (5,))]:
        for cls, args in [("ZeroPad", "{pad}"), ("ConstantPad", "{pad}, 0.5"), ("ReflectionPad", "{pad}"),
                          ("ReplicationPad", "{pad}"), ("CircularPad", "{pad}")]:
            t.append(M(f"{cls}{d}d", args, cat="shape", families=fam, ranks=rk, guard=_spatial(8, 100000)))
    for mode in ["constant", "reflect", "replicate", "circular"]:
        t.append(FN("pad", f"(1, 1, 2, 2), mode='{mode}'", cat="shape", name=f"F.pad/{mode}", families=IMG,
                    ranks=(4,), guard=_spatial(8, 100000)))

    # --- resampling ------------------------------------------------------------------------
    for args, tag, fam, rk in [("scale_factor=2, mode='nearest'", "nearest", IMG, (4,)),
                               ("scale_factor=2, mode='bilinear', align_corners=False", "bilinear", IMG, (4,)),
                               ("scale_factor=2, mode='bicubic', align_corners=True", "bicubic", IMG, (4,)),
                               ("scale_factor=2, mode='linear'", "linear", SIG, (3,)),
                               ("scale_factor=2, mode='trilinear'", "trilinear", VOL, (5,))]:
        t.append(M("Upsample", args, cat="resample", name=f"nn.Upsample/{tag}", families=fam, ranks=rk,
                   guard=lambda s: s[1] <= 256))
    t.append(M("UpsamplingNearest2d", "scale_factor=2", cat="resample", families=IMG, ranks=(4,)))
    t.append(M("UpsamplingBilinear2d", "scale_factor=2", cat="resample", families=IMG, ranks=(4,)))
    for args, tag, fam, rk in [("scale_factor=0.5, mode='area'", "area", IMG, (4,)),
                               ("scale_factor=2, mode='nearest-exact'", "nearest-exact", IMG, (4,)),
                               ("scale_factor=0.5, mode='bilinear', antialias=True", "antialias", IMG, (4,)),
                               ("size=(64, 64), mode='bilinear'", "size", IMG, (4,)),
                               ("scale_factor=2, mode='linear'", "linear", SIG, (3,))]:
        t.append(FN("interpolate", args, cat="resample", name=f"F.interpolate/{tag}", families=fam, ranks=rk))
    t.append(OpSpec("F.grid_sample", "resample", "torch.nn.functional.grid_sample",
                    "F.grid_sample({x}, F.affine_grid({m}.expand({x}.shape[0], 2, 3), list({x}.shape), "
                    "align_corners=False), align_corners=False)",
                    module="nn.Parameter(torch.tensor([[[0.9, 0.1, 0.0], [-0.1, 0.9, 0.0]]]))", families=IMG,
                    ranks=(4,)))
    t.append(OpSpec("F.affine_grid", "resample", "torch.nn.functional.affine_grid",
                    "F.affine_grid({x}[:, :6].reshape(-1, 2, 3), [{x}.shape[0], 3, 64, 64], align_corners=False)",
                    families=("dense",), ranks=(2,), guard=lambda s: s[0] <= 1024))

    # --- attention / transformer / recurrent -------------------------------------------------
    att = lambda s: s[-1] <= 2048 and s[-1] % 8 == 0  # noqa: E731
    t.append(OpSpec("nn.MultiheadAttention", "attention", "torch.nn.MultiheadAttention",
                    "{m}({x}, {x}, {x}, need_weights=False)[0]",
                    module="nn.MultiheadAttention({embed_dim}, {num_heads}, batch_first=True)",
                    families=("seq",), ranks=(3,), guard=att))
    t.append(OpSpec("F.scaled_dot_product_attention", "attention", "torch.nn.functional.scaled_dot_product_attention",
                    "F.scaled_dot_product_attention({x}, {y0}, {y1})", extras=(Extra(SAME), Extra(SAME)),
                    families=("seq",), ranks=(3, 4), guard=att))
    t.append(OpSpec("F.scaled_dot_product_attention/causal", "attention",
                    "torch.nn.functional.scaled_dot_product_attention",
                    "F.scaled_dot_product_attention({x}, {y0}, {y1}, is_causal=True)",
                    extras=(Extra(SAME), Extra(SAME)), families=("seq",), ranks=(3, 4), guard=att))
    t.append(OpSpec("nn.TransformerEncoderLayer", "attention", "torch.nn.TransformerEncoderLayer", "{m}({x})",
                    module="nn.TransformerEncoderLayer({embed_dim}, {num_heads}, dim_feedforward={ff}, dropout=0.0, "
                           "batch_first=True)", params={"ff": lambda s, r: 2 * s[-1]},
                    families=("seq",), ranks=(3,), guard=att))
    t.append(OpSpec("nn.TransformerDecoderLayer", "attention", "torch.nn.TransformerDecoderLayer", "{m}({x}, {y0})",
                    module="nn.TransformerDecoderLayer({embed_dim}, {num_heads}, dim_feedforward={ff}, dropout=0.0, "
                           "batch_first=True)", params={"ff": lambda s, r: 2 * s[-1]}, extras=(Extra(SAME),),
                    families=("seq",), ranks=(3,), guard=att))
    t.append(OpSpec("nn.TransformerEncoder", "attention", "torch.nn.TransformerEncoder", "{m}({x})",
                    module="nn.TransformerEncoder(nn.TransformerEncoderLayer({embed_dim}, {num_heads}, "
                           "dim_feedforward={ff}, dropout=0.0, batch_first=True), num_layers=2, "
                           "enable_nested_tensor=False)",
                    params={"ff": lambda s, r: 2 * s[-1]}, families=("seq",), ranks=(3,), guard=att))
    rnn = lambda s: s[-1] <= 1024  # noqa: E731
    HID = {"hidden": lambda s, r: r.choice([128, 256, 512])}
    for cls, extra_args, tag in [("RNN", "", ""), ("LSTM", "", ""), ("GRU", "", ""),
                                 ("LSTM", ", bidirectional=True", "bi"), ("GRU", ", num_layers=2", "2layer")]:
        t.append(OpSpec(f"nn.{cls}" + (f"/{tag}" if tag else ""), "recurrent", f"torch.nn.{cls}", "{m}({x})[0]",
                        module=f"nn.{cls}({{input_size}}, {{hidden}}, batch_first=True{extra_args})", params=HID,
                        families=("seq",), ranks=(3,), guard=rnn))
    for cls in ["RNNCell", "GRUCell", "LSTMCell"]:
        t.append(OpSpec(f"nn.{cls}", "recurrent", f"torch.nn.{cls}",
                        "{m}({x})" + ("[0]" if cls == "LSTMCell" else ""),
                        module=f"nn.{cls}({{input_size}}, {{hidden}})", params=HID, families=("dense",), ranks=(2,),
                        guard=rnn))

    # --- FFT -------------------------------------------------------------------------------
    for name, expr, fam, rk in [("torch.fft.fft", "torch.fft.fft({x}).abs()", EW, None),
                                ("torch.fft.ifft", "torch.fft.ifft({x}).real", EW, None),
                                ("torch.fft.rfft", "torch.fft.rfft({x}, dim=-1).abs()", EW, None),
                                ("torch.fft.irfft", "torch.fft.irfft(torch.fft.rfft({x}) * 0.5, n={x}.shape[-1])", EW, None),
                                ("torch.fft.fft2", "torch.fft.fft2({x}).abs()", IMG, (4,)),
                                ("torch.fft.rfft2", "torch.fft.rfft2({x}).abs()", IMG, (4,)),
                                ("torch.fft.fftn", "torch.fft.fftn({x}, dim=(-2, -1)).real", IMG, (4,)),
                                ("torch.fft.hfft", "torch.fft.hfft({x})", EW, None),
                                ("torch.fft.ihfft", "torch.fft.ihfft({x}).abs()", EW, None),
                                ("torch.stft", "torch.stft({x}.flatten(0, -2), 256, return_complex=True).abs()",
                                 ("vec", "sig"), (2, 3))]:
        t.append(OpSpec(name, "fft", name, expr, families=fam, ranks=rk))
    return t


KNOWN_SKIPS: dict[str, str] = {
    # stochastic operators (the determinism filter would reject every task using them)
    **{f"torch.nn.{c}": "stochastic" for c in ["Dropout", "Dropout1d", "Dropout2d", "Dropout3d", "AlphaDropout",
                                                "FeatureAlphaDropout", "RReLU", "FractionalMaxPool2d",
                                                "FractionalMaxPool3d"]},
    **{f"torch.nn.functional.{c}": "stochastic" for c in [
        "dropout", "dropout1d", "dropout2d", "dropout3d", "alpha_dropout", "feature_alpha_dropout", "rrelu",
        "gumbel_softmax", "fractional_max_pool2d", "fractional_max_pool3d", "fractional_max_pool2d_with_indices",
        "fractional_max_pool3d_with_indices"]},
    **{f"torch.{c}": "stochastic" for c in ["bernoulli", "multinomial", "normal", "poisson", "rand", "randn",
                                             "randint", "randperm", "rand_like", "randn_like", "randint_like",
                                             "dropout", "alpha_dropout", "feature_dropout", "rrelu"]},
    # not compute operators on a given input
    **{f"torch.nn.{c}": "container or base class" for c in ["Container", "Module", "ModuleDict", "ModuleList",
                                                            "ParameterDict", "ParameterList", "Sequential",
                                                            "RNNBase", "RNNCellBase", "DataParallel"]},
    "torch.nn.Identity": "no compute (identity)",
    "torch.nn.SyncBatchNorm": "needs a distributed process group",
    "torch.nn.CTCLoss": "needs aligned sequence lengths; nondeterministic backward-only kernels on GPU",
    "torch.nn.AdaptiveLogSoftmaxWithLoss": "returns a named tuple of losses with target-dependent shapes",
    "torch.nn.LinearCrossEntropyLoss": "experimental API",
    "torch.nn.MultiLabelMarginLoss": "needs structured -1-padded targets",
    "torch.nn.NLLLoss2d": "deprecated alias of NLLLoss",
    "torch.nn.Transformer": "full encoder-decoder stack is covered by its layers (too large for one task)",
    "torch.nn.TransformerDecoder": "covered by TransformerDecoderLayer",
    **{f"torch.nn.Lazy{c}": "lazy variant of a covered module" for c in [
        "BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "Conv1d", "Conv2d", "Conv3d", "ConvTranspose1d",
        "ConvTranspose2d", "ConvTranspose3d", "InstanceNorm1d", "InstanceNorm2d", "InstanceNorm3d", "Linear"]},
}

SEED_TABLE: list[OpSpec] = _table()
