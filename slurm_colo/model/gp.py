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
at most :data:`HYPER_SUBSAMPLE` entries. Up to :data:`EXACT_LIMIT` entries are solved
exactly (Cholesky); above that the mean uses conjugate gradients with a matrix-product
trick (cost per step O(k^3) for k classes, independent of the number of entries), and
standard deviations come from the subsample (an upper bound of the full-data ones).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.linalg import cho_factor, cho_solve
from scipy.optimize import minimize
from scipy.sparse.linalg import LinearOperator, cg
from threadpoolctl import threadpool_limits

from .data import Entries

HYPER_SUBSAMPLE = 500
EXACT_LIMIT = 2500
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
    entries: Entries
    alpha: np.ndarray
    var_entries: Entries  # entries used for the variance (all, or the subsample)
    var_factor: tuple[np.ndarray, bool]
    nll: float

    @property
    def params(self) -> dict[str, float]:
        names = [f"w_{g}" for g in ("family", "batch", "solo_rate", "sm_util", "memory")]
        names += ["ident", "s_int", "s_row", "s_col", "noise"]
        return {n: round(float(np.exp(t)), 6) for n, t in zip(names, self.theta)}

    def _cross(self, qa: np.ndarray, qb: np.ndarray, e: Entries) -> np.ndarray:
        s_int, s_row, s_col = np.exp(self.theta[N_GROUPS + 1:N_GROUPS + 4])
        ka = self.c[np.ix_(qa, e.ia)]
        kb = self.c[np.ix_(qb, e.ib)]
        return s_int * ka * kb + s_row * ka + s_col * kb

    def predict_grid(self) -> np.ndarray:
        """Posterior mean of log n for every ordered pair of classes (k x k)."""
        with threadpool_limits(limits=1, user_api="blas"):
            return self._predict_grid()

    def _predict_grid(self) -> np.ndarray:
        k = self.c.shape[0]
        s_int, s_row, s_col = np.exp(self.theta[N_GROUPS + 1:N_GROUPS + 4])
        a = np.zeros((k, k))
        np.add.at(a, (self.entries.ia, self.entries.ib), self.alpha)
        grid = s_int * (self.c @ a @ self.c.T)
        grid += s_row * (self.c @ a.sum(1))[:, None]
        grid += s_col * (self.c @ a.sum(0))[None, :]
        return grid + self.mean

    def predict_sd_grid(self, chunk: int = 20000) -> np.ndarray:
        """Posterior standard deviation of log n for every ordered pair (k x k)."""
        with threadpool_limits(limits=1, user_api="blas"):
            return self._predict_sd_grid(chunk)

    def _predict_sd_grid(self, chunk: int) -> np.ndarray:
        k = self.c.shape[0]
        s_int, s_row, s_col = np.exp(self.theta[N_GROUPS + 1:N_GROUPS + 4])
        dc = np.diag(self.c)
        prior = s_int * dc[:, None] * dc[None, :] + s_row * dc[:, None] + s_col * dc[None, :]
        qa, qb = np.divmod(np.arange(k * k), k)
        red = np.zeros(k * k)
        for s in range(0, k * k, chunk):
            kx = self._cross(qa[s:s + chunk], qb[s:s + chunk], self.var_entries)
            v = cho_solve(self.var_factor, kx.T, check_finite=False)
            red[s:s + chunk] = (kx * v.T).sum(1)
        var = np.maximum(prior.ravel() - red, 1e-8)
        return np.sqrt(var).reshape(k, k)


def fit_gp(e: Entries, dists: list[np.ndarray], seed: int = 0,
           optimise: bool = True, theta: np.ndarray | None = None) -> PairGP:
    """Fit the GP to aggregated entries (needs at least one entry).

    BLAS runs single-threaded here: the matrices are small, and a multi-threaded BLAS on a
    busy node is many times slower than one thread."""
    with threadpool_limits(limits=1, user_api="blas"):
        return _fit_gp(e, dists, seed, optimise, theta)


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

    def gram(x: Entries) -> np.ndarray:
        ka = c[np.ix_(x.ia, x.ia)]
        kb = c[np.ix_(x.ib, x.ib)]
        return s_int * ka * kb + s_row * ka + s_col * kb + np.diag(noise / x.w)

    var_e = e if len(e) <= EXACT_LIMIT else sub
    var_factor = cho_factor(gram(var_e), lower=True, check_finite=False)
    yc = e.y - mean
    if len(e) <= EXACT_LIMIT:
        alpha = cho_solve(var_factor, yc, check_finite=False)
    else:
        alpha = _cg_solve(c, e, yc, s_int, s_row, s_col, noise)
    return PairGP(th, mean, c, e, alpha, var_e, var_factor, nll)


def _cg_solve(c: np.ndarray, e: Entries, yc: np.ndarray, s_int: float, s_row: float,
              s_col: float, noise: float) -> np.ndarray:
    k = c.shape[0]
    nd = noise / e.w
    m = len(e)

    def mv(x: np.ndarray) -> np.ndarray:
        a = np.zeros((k, k))
        a[e.ia, e.ib] = x  # entries are unique per ordered pair
        out = s_int * (c @ a @ c)[e.ia, e.ib]
        out += s_row * (c @ a.sum(1))[e.ia]
        out += s_col * (c @ a.sum(0))[e.ib]
        return out + nd * x

    dc = np.diag(c)
    diag = s_int * dc[e.ia] * dc[e.ib] + s_row * dc[e.ia] + s_col * dc[e.ib] + nd
    op = LinearOperator((m, m), matvec=mv, dtype=float)
    pre = LinearOperator((m, m), matvec=lambda x: x / diag, dtype=float)
    x, _info = cg(op, yc, M=pre, rtol=1e-6, maxiter=400)
    return x
