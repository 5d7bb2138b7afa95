"""Gaussian-process regression of ``log n(a | b)`` over pairs of classes.

Kernel between entries (a, b) and (a', b')::

    k = s_int * C[a, a'] * C[b, b']  +  s_row * C[a, a']  +  s_col * C[b, b']
        + s_self * [a = b][a' = b']  +  s_swap * C[a, b'] * C[b, a']
    C = exp(-sum_g w_g^2 D_g / 2) + ident * I          (class similarity)

``s_row`` is "how much a class suffers", ``s_col`` "how much a class disturbs", ``s_int`` the
pair-specific interaction, ``s_self`` what all self-pairs (two jobs of one class) share,
``s_swap = rho * s_int`` (rho <= 1 keeps the kernel valid) ties ``n(a | b)`` to
``n(b | a)``. That is the ``pairs`` form. Two tied forms serve quantities of an unordered
pair (see :mod:`.share`): ``symmetric`` (``f(a, b) = f(b, a)``: ``s_col = s_row``,
``s_swap = s_int`` and a cross term ``s_row * (C[a, b'] + C[b, a'])``) and ``antisymmetric``
(``f(a, b) = -f(b, a)``: the same with ``s_swap`` and the cross term negated, no self
term). ``D_g`` are the feature-group distances of
:mod:`.features` and ``ident`` lets each class keep an identity of its own beyond its
features. This is matrix completion with side information: a pair never measured borrows
from rows and columns of similar classes; a class with no pair data at all is predicted
from its features only; with little data the prediction falls back to the mean (the prior)
and the posterior standard deviation grows. Noise per entry is ``noise / weight``.

Hyper-parameters are fitted by maximising the marginal likelihood (analytic gradients) on
at most :data:`HYPER_SUBSAMPLE` entries. Up to :data:`EXACT_LIMIT` entries the posterior is
exact. Above that (hundreds of classes) the structure comes from a stratified subsample of
:data:`EXACT_LIMIT` entries (the heaviest entries of every class plus random ones; the
standard deviation from :data:`VAR_SUBSAMPLE`, an upper bound), and then every observed
pair's own aggregated value is folded in by a precision-weighted update: cost grows with
the number of classes, not of episodes.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
from scipy.linalg import cho_factor, cho_solve, solve_triangular
from scipy.optimize import minimize
from threadpoolctl import threadpool_limits

from ..errors import ModelError
from .data import Entries

HYPER_SUBSAMPLE = 500
EXACT_LIMIT = 2500
VAR_SUBSAMPLE = 250
N_GROUPS = 5
# log-parameters: w_g (N_GROUPS), ident, s_int, s_row, s_col, s_self, s_swap, noise
I_IDENT, I_INT, I_ROW, I_COL, I_SELF, I_SWAP = range(N_GROUPS, N_GROUPS + 6)
# the swap term is s_int * rho with rho <= 1: only then is the kernel positive semi-definite
# (C x C)(s_int + s_swap P) with P the swap of a pair has eigenvalues s_int -+ s_swap)
_START = np.log([1.0] * N_GROUPS + [0.1, 0.05, 0.05, 0.05, 0.01, 0.3, 1e-3])
_BOUNDS = (
    [(-5.0, 3.0)] * N_GROUPS
    + [(-6.0, 2.0)] * 4
    + [(-9.0, 2.0), (-9.0, 0.0)]
    + [(float(np.log(1e-3)), 0.0)]
)
PARAM_NAMES = (
    "w_family",
    "w_batch",
    "w_solo_rate",
    "w_sm_util",
    "w_memory",
    "ident",
    "s_int",
    "s_row",
    "s_col",
    "s_self",
    "rho_swap",
    "noise",
)


def _class_kernel(theta: np.ndarray, dists: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    w2 = np.exp(2.0 * theta[:N_GROUPS])
    d = sum(wg * dg for wg, dg in zip(w2, dists))
    rbf = np.exp(-0.5 * d)
    c = rbf + np.exp(theta[I_IDENT]) * np.eye(rbf.shape[0])
    return c, rbf


FORMS = ("pairs", "symmetric", "antisymmetric")
# Each form's term scales (int, row, col, self, swap, cross) as sign * exp(E @ theta[I_INT:]):
# rows of E are the exponents of (s_int, s_row, s_col, s_self, rho_swap) in each scale.
_E = {
    "pairs": np.array(
        [
            [1, 0, 0, 0, 0],
            [0, 1, 0, 0, 0],
            [0, 0, 1, 0, 0],
            [0, 0, 0, 1, 0],
            [1, 0, 0, 0, 1],
            [0, 0, 0, 0, 0],
        ],
        float,
    ),
    "symmetric": np.array(
        [
            [1, 0, 0, 0, 0],
            [0, 1, 0, 0, 0],
            [0, 1, 0, 0, 0],
            [0, 0, 0, 1, 0],
            [1, 0, 0, 0, 0],
            [0, 1, 0, 0, 0],
        ],
        float,
    ),
    "antisymmetric": np.array(
        [
            [1, 0, 0, 0, 0],
            [0, 1, 0, 0, 0],
            [0, 1, 0, 0, 0],
            [0, 0, 0, 0, 0],
            [1, 0, 0, 0, 0],
            [0, 1, 0, 0, 0],
        ],
        float,
    ),
}
_SIGN = {
    "pairs": np.array([1.0, 1, 1, 1, 1, 0]),
    "symmetric": np.array([1.0, 1, 1, 1, 1, 1]),
    "antisymmetric": np.array([1.0, 1, 1, 0, -1, -1]),
}


def _scales(theta: np.ndarray, form: str = "pairs") -> np.ndarray:
    """Scales of the six terms (int, row, col, self, swap, cross) in ``form``; in the
    ``pairs`` form s_swap = s_int * rho_swap and there is no cross term."""
    return _SIGN[form] * np.exp(_E[form] @ theta[I_INT : I_SWAP + 1])


def _parts(c: np.ndarray, x1: Entries, x2: Entries) -> tuple[np.ndarray, ...]:
    """The class-kernel blocks between two entry sets: C[a,a'], C[b,b'], C[a,b'], C[b,a'],
    and the self-pair indicator product."""
    ka = c[np.ix_(x1.ia, x2.ia)]
    kb = c[np.ix_(x1.ib, x2.ib)]
    xs = c[np.ix_(x1.ia, x2.ib)]
    xt = c[np.ix_(x1.ib, x2.ia)]
    ss = np.outer(x1.ia == x1.ib, x2.ia == x2.ib).astype(float)
    return ka, kb, xs, xt, ss


def _terms(
    ka: np.ndarray, kb: np.ndarray, xs: np.ndarray, xt: np.ndarray, ss: np.ndarray
) -> list[np.ndarray]:
    return [ka * kb, ka, kb, ss, xs * xt, xs + xt]


def cross_kernel(
    theta: np.ndarray, c: np.ndarray, x1: Entries, x2: Entries, form: str = "pairs"
) -> np.ndarray:
    """Kernel matrix between two entry sets (no noise).

    Beyond the row/column/interaction terms: ``s_self`` is shared by all self-pairs (two
    jobs of one class), ``s_swap`` ties ``n(a | b)`` to ``n(b | a)`` (contention hurts both).
    """
    s_int, s_row, s_col, s_self, s_swap, s_cross = _scales(theta, form)
    ka, kb, xs, xt, ss = _parts(c, x1, x2)
    out = s_int * ka * kb  # in place from here: these are the largest arrays of a retrain
    out += s_row * ka
    out += s_col * kb
    if s_self:
        out += s_self * ss
    if s_swap:
        out += s_swap * xs * xt
    if s_cross:
        xs += xt
        out += s_cross * xs
    return out


def _nll_and_grad(
    theta: np.ndarray, dists: list[np.ndarray], e: Entries, yc: np.ndarray, form: str = "pairs"
) -> tuple[float, np.ndarray]:
    c, rbf = _class_kernel(theta, dists)
    sc = _scales(theta, form)
    s_int, s_row, s_col, _, s_swap, s_cross = sc
    noise = np.exp(theta[-1])
    ka, kb, xs, xt, ss = _parts(c, e, e)
    terms = _terms(ka, kb, xs, xt, ss)
    nd = noise / e.w
    k = sum(s * t for s, t in zip(sc, terms)) + np.diag(nd)
    try:
        f = cho_factor(k, lower=True, check_finite=False)
    except np.linalg.LinAlgError:
        return 1e12, np.zeros_like(theta)
    alpha = cho_solve(f, yc, check_finite=False)
    nll = 0.5 * float(yc @ alpha) + float(np.log(np.diag(f[0])).sum())
    kinv = cho_solve(f, np.eye(len(yc)), check_finite=False)
    wmat = 0.5 * (np.outer(alpha, alpha) - kinv)  # d nll / dK = -wmat
    grad = np.zeros_like(theta)
    da = s_int * kb + s_row  # dK/dKa
    db = s_int * ka + s_col  # dK/dKb
    ds = s_swap * xt + s_cross  # dK/dXs
    dt = s_swap * xs + s_cross  # dK/dXt

    # d nll / dC, gathered once onto the k x k class grid: each hyper-parameter of C then
    # costs one k x k product instead of four m x m gathers
    k = c.shape[0]
    dc_total = np.zeros(k * k)
    for u, v, d in ((e.ia, e.ia, da), (e.ib, e.ib, db), (e.ia, e.ib, ds), (e.ib, e.ia, dt)):
        dc_total += np.bincount(
            (u[:, None] * k + v[None, :]).ravel(), weights=(wmat * d).ravel(), minlength=k * k
        )
    dnll_dc = dc_total.reshape(k, k)

    def chain(dc: np.ndarray) -> float:
        return -float((dnll_dc * dc).sum())

    w2 = np.exp(2.0 * theta[:N_GROUPS])
    for g in range(N_GROUPS):
        grad[g] = chain(-w2[g] * dists[g] * rbf)
    grad[I_IDENT] = chain(np.exp(theta[I_IDENT]) * np.eye(c.shape[0]))
    # d scale_t / d theta_j = scale_t * E[t, j]
    per_term = np.array([-float((wmat * t).sum()) for t in terms]) * sc
    grad[I_INT : I_SWAP + 1] = per_term @ _E[form]
    grad[-1] = -float((np.diag(wmat) * nd).sum())
    return nll, grad


def _subset(e: Entries, idx: np.ndarray) -> Entries:
    return Entries(e.ia[idx], e.ib[idx], e.y[idx], e.w[idx], e.censored[idx])


@dataclass
class PairGP:
    theta: np.ndarray
    mean: float
    c: np.ndarray  # class kernel
    entries: Entries  # entries the mean is conditioned on (all, or a stratified subsample)
    alpha: np.ndarray
    var_entries: Entries  # entries the variance is conditioned on (all, or a subsample)
    var_factor: tuple[np.ndarray, bool]
    nll: float
    #: large data only: every entry, folded in afterwards by a per-pair precision update
    local: Entries | None = None
    form: str = "pairs"

    @property
    def params(self) -> dict[str, float]:
        """Fitted hyper-parameters by name (those the form uses)."""
        used = np.ones(len(self.theta), bool)
        used[I_INT : I_SWAP + 1] = np.abs(_E[self.form][_SIGN[self.form] != 0]).sum(0) > 0
        return {n: float(f"{np.exp(t):.6g}") for n, t, u in zip(PARAM_NAMES, self.theta, used) if u}

    def predict(self, fold_in: bool = True) -> tuple[np.ndarray, np.ndarray]:
        """Posterior (mean, standard deviation) of log n for every ordered pair (k x k);
        ``pairs`` form only. ``fold_in=False`` leaves out the per-pair update of large data
        (:meth:`fold_in` applies it later, e.g. to a combined mean)."""
        if self.form != "pairs":
            raise ModelError(f"standard deviations need the 'pairs' form, not {self.form!r}")
        with threadpool_limits(limits=1, user_api="blas"):
            mean, sd = self.mean_grid(), self._sd_grid()
            if fold_in:
                mean, sd = self.fold_in(mean, sd)
            return mean, sd

    def mean_grid(self) -> np.ndarray:
        """Posterior mean for every ordered pair (k x k), before any fold-in."""
        k = self.c.shape[0]
        s_int, s_row, s_col, s_self, s_swap, s_cross = _scales(self.theta, self.form)
        a = np.zeros((k, k))
        np.add.at(a, (self.entries.ia, self.entries.ib), self.alpha)
        rows, cols = self.c @ a.sum(1), self.c @ a.sum(0)
        grid = s_int * (self.c @ a @ self.c.T)
        grid += s_swap * (self.c @ a.T @ self.c.T)
        grid += s_row * rows[:, None] + s_col * cols[None, :]
        grid += s_cross * (cols[:, None] + rows[None, :])
        grid[np.diag_indices(k)] += s_self * float(np.trace(a))
        return grid + self.mean

    def _sd_grid(self) -> np.ndarray:
        """Row by row: k(x, X) for all pairs (a, .) is a broadcast of class-kernel rows."""
        k = self.c.shape[0]
        s_int, s_row, s_col, s_self, s_swap, _ = _scales(self.theta)
        dc = np.diag(self.c)
        prior = s_int * dc[:, None] * dc[None, :] + s_row * dc[:, None] + s_col * dc[None, :]
        prior += s_swap * self.c * self.c.T + s_self * np.eye(k)
        selfm = (self.var_entries.ia == self.var_entries.ib).astype(np.float32) * np.float32(s_self)
        # float32 is plenty for a standard deviation and halves the cost
        ca = self.c[:, self.var_entries.ia].astype(np.float32)  # k x m
        cb = self.c[:, self.var_entries.ib].astype(np.float32)
        lower = self.var_factor[0]
        linv = solve_triangular(
            lower, np.eye(lower.shape[0]), lower=True, check_finite=False
        ).T.astype(np.float32)
        for arr in (ca, cb, linv):  # float32 denormals make every product crawl
            arr[np.abs(arr) < 1e-15] = 0.0
        red = np.empty((k, k))
        cb_l = np.float32(s_col) * (cb @ linv)  # the column term, the same for every row
        si, sr, sw = np.float32(s_int), np.float32(s_row), np.float32(s_swap)
        step = max(1, 8192 // max(k, 1))  # rows per block: one large product per block
        for a0 in range(0, k, step):
            blk = ca[a0 : a0 + step, None, :]  # r x 1 x m
            x = si * blk * cb[None] + sr * blk + sw * cb[a0 : a0 + step, None, :] * ca[None]
            r = np.arange(x.shape[0])
            x[r, a0 + r, :] += selfm  # the query (a, a) is a self-pair
            v = (x.reshape(-1, ca.shape[1]) @ linv).reshape(blk.shape[0], k, -1) + cb_l[None]
            red[a0 : a0 + step] = np.einsum("rij,rij->ri", v, v)
        return np.sqrt(np.maximum(prior - red, 1e-8))

    def fold_in(self, mean: np.ndarray, sd: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Large data: a precision-weighted update of each observed pair with its own
        aggregated value (nothing to do when the posterior is exact)."""
        if self.local is None:
            return mean, sd
        e = self.local
        noise = float(np.exp(self.theta[-1]))
        prec_obs = e.w / noise
        var0 = sd[e.ia, e.ib] ** 2
        prec = 1.0 / var0 + prec_obs
        mean = mean.copy()
        sd = sd.copy()
        mean[e.ia, e.ib] = (mean[e.ia, e.ib] / var0 + e.y * prec_obs) / prec
        sd[e.ia, e.ib] = np.sqrt(1.0 / prec)
        return mean, sd


def theta_from_params(params: Mapping[str, float]) -> np.ndarray:
    """Log-parameters from :attr:`PairGP.params`; names not given keep their start values."""
    th = _START.copy()
    for i, name in enumerate(PARAM_NAMES):
        v = params.get(name)
        if isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0:
            th[i] = math.log(v)
    return th


def fit_gp(
    e: Entries,
    dists: list[np.ndarray],
    seed: int = 0,
    optimise: bool = True,
    theta: np.ndarray | None = None,
    form: str = "pairs",
    fixed: object = None,
) -> PairGP:
    """Fit the GP to aggregated entries (needs at least one entry). In the
    ``antisymmetric`` form the prior mean is 0 (the only antisymmetric constant).
    ``fixed``: :attr:`PairGP.params` of an earlier fit, used as they are (no search);
    anything but a non-empty mapping is ignored.

    BLAS runs single-threaded here: the matrices are small, and a multi-threaded BLAS on a
    busy node is many times slower than one thread."""
    if form not in FORMS:
        raise ModelError(f"unknown kernel form {form!r}; known: {', '.join(FORMS)}")
    if isinstance(fixed, Mapping) and fixed:
        theta, optimise = theta_from_params(fixed), False
    with threadpool_limits(limits=1, user_api="blas"):
        return _fit_gp(e, dists, seed, optimise, theta, form)


def _stratified(e: Entries, size: int, rng: np.random.Generator) -> np.ndarray:
    """Indexes of about ``size`` entries: the heaviest few of every row class, every column
    class, then random ones, so that every class keeps some weight in the structure."""
    k = int(max(e.ia.max(), e.ib.max())) + 1
    per = max(1, size // (4 * k))
    order = np.argsort(-e.w, kind="stable")
    picked: list[np.ndarray] = []
    for key in (e.ia, e.ib):
        ranked = key[order]
        first = np.zeros(len(order), bool)
        # rank of each entry within its class, heaviest first
        srt = np.argsort(ranked, kind="stable")
        grp = ranked[srt]
        starts = np.r_[0, np.flatnonzero(np.diff(grp)) + 1]
        rank = np.arange(len(grp)) - np.repeat(starts, np.diff(np.r_[starts, len(grp)]))
        first[srt[rank < per]] = True
        picked.append(order[first])
    chosen = np.unique(np.concatenate(picked))
    if len(chosen) > size:  # more classes than budget: a random share of the heavy ones
        chosen = rng.choice(chosen, size, replace=False)
    rest = np.setdiff1d(np.arange(len(e)), chosen)
    extra = max(0, size - len(chosen))
    if extra and len(rest):
        chosen = np.concatenate([chosen, rng.choice(rest, min(extra, len(rest)), replace=False)])
    return np.sort(chosen)


def _fit_gp(
    e: Entries,
    dists: list[np.ndarray],
    seed: int,
    optimise: bool,
    theta: np.ndarray | None,
    form: str,
) -> PairGP:
    rng = np.random.default_rng(seed)
    w = e.w / e.w.mean()
    e = Entries(e.ia, e.ib, e.y, np.clip(w, 0.05, 50.0), e.censored)
    mean = 0.0 if form == "antisymmetric" else float(np.average(e.y, weights=e.w))
    if len(e) > HYPER_SUBSAMPLE:
        sub = _subset(e, np.sort(rng.choice(len(e), HYPER_SUBSAMPLE, replace=False)))
    else:
        sub = e
    th = _START.copy() if theta is None else np.asarray(theta, float)
    nll = float("nan")
    if optimise and len(sub) >= 8:
        res = minimize(
            _nll_and_grad,
            th,
            args=(dists, sub, sub.y - mean, form),
            jac=True,
            method="L-BFGS-B",
            bounds=_BOUNDS,
            options={"maxiter": 150},
        )
        th, nll = res.x, float(res.fun)
    c, _ = _class_kernel(th, dists)
    noise = np.exp(th[-1])

    def factor(x: Entries) -> tuple[np.ndarray, bool]:
        g = cross_kernel(th, c, x, x, form) + np.diag(noise / x.w)
        jitter = 0.0
        for _ in range(6):  # round-off can leave a valid kernel a hair short of definite
            try:
                return cho_factor(g + jitter * np.eye(len(g)), lower=True, check_finite=False)
            except np.linalg.LinAlgError:
                jitter = max(jitter * 10.0, 1e-8 * float(np.trace(g)) / len(g))
        raise ModelError("the model's kernel matrix is not positive definite (degenerate data)")

    if len(e) <= EXACT_LIMIT:
        f = factor(e)
        alpha = cho_solve(f, e.y - mean, check_finite=False)
        return PairGP(th, mean, c, e, alpha, e, f, nll, form=form)
    # large data: the structure from a stratified subsample, every entry folded in after
    mean_e = _subset(e, _stratified(e, EXACT_LIMIT, rng))
    alpha = cho_solve(factor(mean_e), mean_e.y - mean, check_finite=False)
    var_e = _subset(e, _stratified(e, VAR_SUBSAMPLE, rng))
    return PairGP(th, mean, c, mean_e, alpha, var_e, factor(var_e), nll, local=e, form=form)
