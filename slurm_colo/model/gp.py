"""Gaussian-process regression of ``log n(a | b)`` over pairs of classes.

Kernel between entries (a, b) and (a', b')::

    k = s_int * C[a, a'] * C[b, b']  +  s_row * C[a, a']  +  s_col * C[b, b']
    C = exp(-sum_g w_g^2 D_g / 2) + ident * I          (class similarity)

``s_row`` is "how much a class suffers", ``s_col`` "how much a class disturbs", ``s_int`` the
pair-specific interaction; ``D_g`` are the feature-group distances of
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

from dataclasses import dataclass

import numpy as np
from scipy.linalg import cho_factor, cho_solve, solve_triangular
from scipy.optimize import minimize
from threadpoolctl import threadpool_limits

from .data import Entries

HYPER_SUBSAMPLE = 500
EXACT_LIMIT = 2500
VAR_SUBSAMPLE = 250
N_GROUPS = 5
# log-parameters: w_g (N_GROUPS), ident, s_int, s_row, s_col, noise
_START = np.log([1.0, 1.0, 1.0, 1.0, 1.0, 0.1, 0.05, 0.05, 0.05, 1e-3])
_BOUNDS = [(-5.0, 3.0)] * N_GROUPS + [(-6.0, 2.0)] * 4 + [(-9.0, 0.0)]


def _class_kernel(theta: np.ndarray, dists: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    w2 = np.exp(2.0 * theta[:N_GROUPS])
    d = sum(wg * dg for wg, dg in zip(w2, dists))
    rbf = np.exp(-0.5 * d)
    c = rbf + np.exp(theta[N_GROUPS]) * np.eye(rbf.shape[0])
    return c, rbf


def _nll_and_grad(theta: np.ndarray, dists: list[np.ndarray], e: Entries,
                  yc: np.ndarray) -> tuple[float, np.ndarray]:
    c, rbf = _class_kernel(theta, dists)
    s_int, s_row, s_col = np.exp(theta[N_GROUPS + 1:N_GROUPS + 4])
    noise = np.exp(theta[-1])
    ka = c[np.ix_(e.ia, e.ia)]
    kb = c[np.ix_(e.ib, e.ib)]
    nd = noise / e.w
    k = s_int * ka * kb + s_row * ka + s_col * kb + np.diag(nd)
    try:
        f = cho_factor(k, lower=True, check_finite=False)
    except np.linalg.LinAlgError:
        return 1e12, np.zeros_like(theta)
    alpha = cho_solve(f, yc, check_finite=False)
    nll = 0.5 * float(yc @ alpha) + float(np.log(np.diag(f[0])).sum())
    kinv = cho_solve(f, np.eye(len(yc)), check_finite=False)
    wmat = 0.5 * (np.outer(alpha, alpha) - kinv)  # d nll / dK = -wmat
    grad = np.zeros_like(theta)
    da_common = s_int * kb + s_row  # dK/dKa
    db_common = s_int * ka + s_col  # dK/dKb
    w2 = np.exp(2.0 * theta[:N_GROUPS])
    for g in range(N_GROUPS):
        dc = -w2[g] * dists[g] * rbf
        dka = dc[np.ix_(e.ia, e.ia)]
        dkb = dc[np.ix_(e.ib, e.ib)]
        grad[g] = -float((wmat * (da_common * dka + db_common * dkb)).sum())
    ident = np.exp(theta[N_GROUPS])
    eq_a = (e.ia[:, None] == e.ia[None, :]) * ident
    eq_b = (e.ib[:, None] == e.ib[None, :]) * ident
    grad[N_GROUPS] = -float((wmat * (da_common * eq_a + db_common * eq_b)).sum())
    grad[N_GROUPS + 1] = -float((wmat * (s_int * ka * kb)).sum())
    grad[N_GROUPS + 2] = -float((wmat * (s_row * ka)).sum())
    grad[N_GROUPS + 3] = -float((wmat * (s_col * kb)).sum())
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

    @property
    def params(self) -> dict[str, float]:
        names = [f"w_{g}" for g in ("family", "batch", "solo_rate", "sm_util", "memory")]
        names += ["ident", "s_int", "s_row", "s_col", "noise"]
        return {n: round(float(np.exp(t)), 6) for n, t in zip(names, self.theta)}

    def predict(self) -> tuple[np.ndarray, np.ndarray]:
        """Posterior (mean, standard deviation) of log n for every ordered pair (k x k)."""
        with threadpool_limits(limits=1, user_api="blas"):
            mean, sd = self._mean_grid(), self._sd_grid()
            if self.local is not None:
                mean, sd = self._fold_in(mean, sd, self.local)
            return mean, sd

    def _scales(self) -> tuple[float, float, float]:
        s_int, s_row, s_col = np.exp(self.theta[N_GROUPS + 1:N_GROUPS + 4])
        return float(s_int), float(s_row), float(s_col)

    def _mean_grid(self) -> np.ndarray:
        k = self.c.shape[0]
        s_int, s_row, s_col = self._scales()
        a = np.zeros((k, k))
        np.add.at(a, (self.entries.ia, self.entries.ib), self.alpha)
        grid = s_int * (self.c @ a @ self.c.T)
        grid += s_row * (self.c @ a.sum(1))[:, None]
        grid += s_col * (self.c @ a.sum(0))[None, :]
        return grid + self.mean

    def _sd_grid(self) -> np.ndarray:
        """Row by row: k(x, X) for all pairs (a, .) is a broadcast of class-kernel rows."""
        k = self.c.shape[0]
        s_int, s_row, s_col = self._scales()
        dc = np.diag(self.c)
        prior = s_int * dc[:, None] * dc[None, :] + s_row * dc[:, None] + s_col * dc[None, :]
        # float32 is plenty for a standard deviation and halves the cost
        ca = self.c[:, self.var_entries.ia].astype(np.float32)  # k x m
        cb = self.c[:, self.var_entries.ib].astype(np.float32)
        lower = self.var_factor[0]
        linv = solve_triangular(lower, np.eye(lower.shape[0]), lower=True,
                                check_finite=False).T.astype(np.float32)
        for arr in (ca, cb, linv):  # float32 denormals make every product crawl
            arr[np.abs(arr) < 1e-15] = 0.0
        red = np.empty((k, k))
        cb_l = np.float32(s_col) * (cb @ linv)  # the column term, the same for every row
        si, sr = np.float32(s_int), np.float32(s_row)
        step = max(1, 8192 // max(k, 1))  # rows per block: one large product per block
        for a0 in range(0, k, step):
            blk = ca[a0:a0 + step, None, :]  # r x 1 x m
            x = (si * blk * cb[None] + sr * blk).reshape(-1, ca.shape[1])
            v = (x @ linv).reshape(blk.shape[0], k, -1) + cb_l[None]
            red[a0:a0 + step] = np.einsum("rij,rij->ri", v, v)
        return np.sqrt(np.maximum(prior - red, 1e-8))

    def _fold_in(self, mean: np.ndarray, sd: np.ndarray, e: Entries) -> tuple[np.ndarray, np.ndarray]:
        """Precision-weighted update of each observed pair with its own aggregated value."""
        noise = float(np.exp(self.theta[-1]))
        prec_obs = e.w / noise
        var0 = sd[e.ia, e.ib] ** 2
        prec = 1.0 / var0 + prec_obs
        mean = mean.copy()
        sd = sd.copy()
        mean[e.ia, e.ib] = (mean[e.ia, e.ib] / var0 + e.y * prec_obs) / prec
        sd[e.ia, e.ib] = np.sqrt(1.0 / prec)
        return mean, sd


def fit_gp(e: Entries, dists: list[np.ndarray], seed: int = 0,
           optimise: bool = True, theta: np.ndarray | None = None) -> PairGP:
    """Fit the GP to aggregated entries (needs at least one entry).

    BLAS runs single-threaded here: the matrices are small, and a multi-threaded BLAS on a
    busy node is many times slower than one thread."""
    with threadpool_limits(limits=1, user_api="blas"):
        return _fit_gp(e, dists, seed, optimise, theta)


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


def _fit_gp(e: Entries, dists: list[np.ndarray], seed: int, optimise: bool,
            theta: np.ndarray | None) -> PairGP:
    rng = np.random.default_rng(seed)
    w = e.w / e.w.mean()
    e = Entries(e.ia, e.ib, e.y, np.clip(w, 0.05, 50.0), e.censored)
    mean = float(np.average(e.y, weights=e.w))
    if len(e) > HYPER_SUBSAMPLE:
        sub = _subset(e, np.sort(rng.choice(len(e), HYPER_SUBSAMPLE, replace=False)))
    else:
        sub = e
    th = _START.copy() if theta is None else np.asarray(theta, float)
    nll = float("nan")
    if optimise and len(sub) >= 8:
        res = minimize(_nll_and_grad, th, args=(dists, sub, sub.y - mean), jac=True,
                       method="L-BFGS-B", bounds=_BOUNDS, options={"maxiter": 150})
        th, nll = res.x, float(res.fun)
    c, _ = _class_kernel(th, dists)
    s_int, s_row, s_col = np.exp(th[N_GROUPS + 1:N_GROUPS + 4])
    noise = np.exp(th[-1])

    def factor(x: Entries) -> tuple[np.ndarray, bool]:
        ka = c[np.ix_(x.ia, x.ia)]
        kb = c[np.ix_(x.ib, x.ib)]
        g = s_int * ka * kb + s_row * ka + s_col * kb + np.diag(noise / x.w)
        return cho_factor(g, lower=True, check_finite=False)

    if len(e) <= EXACT_LIMIT:
        f = factor(e)
        alpha = cho_solve(f, e.y - mean, check_finite=False)
        return PairGP(th, mean, c, e, alpha, e, f, nll)
    # large data: the structure from a stratified subsample, every entry folded in after
    mean_e = _subset(e, _stratified(e, EXACT_LIMIT, rng))
    alpha = cho_solve(factor(mean_e), mean_e.y - mean, check_finite=False)
    var_e = _subset(e, _stratified(e, VAR_SUBSAMPLE, rng))
    return PairGP(th, mean, c, mean_e, alpha, var_e, factor(var_e), nll, local=e)
