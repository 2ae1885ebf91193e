"""Fits the analytic GEMM-time forms discussed in kernel_rates.md (b) to tables in gemm_points.json.

Run: /usr/bin/python3 fit_gemm_models.py   (needs numpy; takes a few minutes on 2 cores)

t = t0 + max( 2*TM*TN*work / (peak/SMs * core_eff),  bytes / (HBM_bw * mem_eff) )
  wave   : work = ceil(tiles/SMs) * 64*ceil((k+k0)/64)                 (data-parallel tiles)
  hybrid : work = min(wave, (1+fixup) * 64*ceil(tiles*ceil((k+k0)/64)/SMs))  (split-K / stream-K)
  tiles  = ceil(m/TM)*ceil(n/TN)*batch*groups, bytes = 2*(mk+kn+mn)*batch*groups (bf16)
Grid search over TM x TN, k0, fixup, mem_eff, t0; core_eff on a log grid; objective = rms of log(pred/meas).
"""
import json, math, os
import numpy as np
G = json.load(open(os.path.join(os.path.dirname(os.path.abspath(__file__)), 'gemm_points.json')))

def pick(gpu_sub, dtype, kind, src_sub, filt=lambda p: True):
    out = []
    for t in G['tables']:
        if gpu_sub in t['gpu'] and t['dtype'] == dtype and t['kind'] == kind and src_sub in t['source']:
            out += [p for p in t['points'] if filt(p)]
    return out

def fit(pts, SM, peak, bw, mode):
    B = np.array([p.get('batch', 1) * p.get('groups', 1) for p in pts], float)
    tm = np.array([2 * p['m'] * p['n'] * p['k'] * b / (p['tflops'] * 1e12) for p, b in zip(pts, B)])
    byt = np.array([2 * b * (p['m'] * p['k'] + p['k'] * p['n'] + p['m'] * p['n']) for p, b in zip(pts, B)], float)
    kk = np.array([p['k'] for p in pts], float)
    best = None
    for TM, TN in ((128, 128), (128, 256)):
        tiles = np.array([math.ceil(p['m'] / TM) * math.ceil(p['n'] / TN) for p in pts]) * B
        for k0 in range(0, 769, 64):
            kit = np.ceil((kk + k0) / 64)
            wave = np.ceil(tiles / SM) * kit * 64
            sk = np.ceil(tiles * kit / SM) * 64
            for fixup in ((0,) if mode == 'wave' else (0, 0.25, 0.5, 1.0)):
                work = wave if mode == 'wave' else np.minimum(wave, sk * (1 + fixup))
                for memeff in (0.6, 0.7, 0.8, 0.9):
                    tmem = byt / (bw * memeff)
                    for t0 in np.arange(0, 10.01, 0.5) * 1e-6:
                        for eff in np.exp(np.linspace(np.log(0.3), np.log(1.0), 40)):
                            pred = t0 + np.maximum(2 * TM * TN * work / (peak * 1e12 / SM * eff), tmem)
                            r = np.log(pred / tm)
                            rms = float(np.sqrt(np.mean(r ** 2)))
                            if best is None or rms < best[0]:
                                best = (rms, f"{TM}x{TN}", k0, fixup, memeff, round(float(t0) * 1e6, 1), round(float(eff), 3),
                                        float(np.max(np.abs(np.exp(r) - 1))), float(np.median(np.abs(np.exp(r) - 1))))
    return dict(zip(['rms_log', 'tile', 'k0', 'fixup', 'mem_eff', 't0_us', 'core_eff', 'max_abs_err', 'median_abs_err'],
                    [round(x, 3) if isinstance(x, float) else x for x in best]))

SETS = {  # SM counts and HBM bandwidths: datasheet values, see kernel_rates.md (b)
    'H100 XLA bf16': (pick('H100', 'bf16', 'dense', 'matmul_interpolator'), 132, 989.4, 3.35e12),
    'B200 XLA bf16': (pick('B200', 'bf16', 'dense', 'matmul_interpolator'), 148, 2250, 7.7e12),
    'B200 SimuMax TE bf16': (pick('B200', 'bf16', 'dense', 'SimuMax'), 148, 2250, 7.7e12),
    'A100 SimuMax TE bf16': (pick('A100', 'bf16', 'dense', 'SimuMax'), 108, 312, 1.94e12),
    'H200 probe bf16': (pick('H200', 'bf16', 'dense', 'probe.json'), 132, 989.4, 4.8e12),
}
if __name__ == '__main__':
    for name, (pts, SM, peak, bw) in SETS.items():
        for mode in ('wave', 'hybrid'):
            print(name, f'n={len(pts)}', mode, fit(pts, SM, peak, bw, mode), flush=True)
