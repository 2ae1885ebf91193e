#!/usr/bin/env python3
"""Writes the measured GEMM tables of docs/research/kernels/gemm_points.json into the zoo's
cluster files (compute.gemm_tables), each with its source. Microbenchmarks only, never a
training run (docs/model.md, "GEMMs by shape"). Run from the repository root:

    python3 tools/data/gemm_tables_to_clusters.py

Which table goes where (docs/model.md says why):
  H200 (dgx-h200 and docs/fidelity's kempner-h200-4gpu): this project's H200 probe (12 Llama
      3 8B shapes), as it was, and TileOPs' grouped rows.
  H100 (dgx-h100, h100-96gb): none. OpenXLA's H100 table (375 CUPTI-timed shapes up to 4096)
      predicts the H200 probe's LLM shapes 11 % fast (docs/model.md): its small operands stay
      in L2 between XLA's timed runs, so it would make an optimistic table.
  B200 (dgx-b200): SimuMax's Transformer Engine tables (514 dense, 108 grouped LLM shapes).
  GB200, GB300 (gb200-nvl72, gb300-nvl72): the B200 tables, measured_on the HGX B200, at
      MAMF's best-shape ratio of the two GPUs.
  A100 (dgx-a100, dgx-a100-40gb): SimuMax's A100 tables (183 dense, 12 grouped).
  H200 grouped (dgx-h200): TileOPs' torch._grouped_mm and DeepGEMM BF16 rows (power-bound).
"""
import json
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
POINTS = json.load(open(os.path.join(ROOT, 'docs/research/kernels/gemm_points.json')))


def table(index):
    t = POINTS['tables'][index]
    return t


def points_of(index):
    """The table's points as the cluster format has them: one group's m x n x k (m the
    output rows, k the contraction) and the group count."""
    out = []
    for p in table(index)['points']:
        m, n, k = p['m'], p['n'], p['k']
        groups = p.get('groups', p.get('batch', 1))
        stage = p.get('stage', 'fwd')
        if stage == 'bwd_grad_act':  # [M,N] x [N,K]: output M x K, contraction N
            n, k = k, n
        elif stage == 'bwd_grad_w':  # contraction over the tokens M: output K x N
            m, n, k = k, n, m
        q = {'m': m, 'n': n, 'k': k}
        if groups > 1:
            q['groups'] = groups
        q['tflops'] = round(p['tflops'], 1)
        out.append(q)
    return out


def source_of(*indices):
    return ' + '.join(f"{table(i)['gpu']}: {table(i)['source']}" for i in indices).replace(
        'shardplan repo /work/main ', 'this repository, ')


def render(tables):
    lines = ['    "gemm_tables": [']
    for ti, t in enumerate(tables):
        lines.append('      {')
        lines.append(f'        "precision": "{t["precision"]}",')
        if t.get('grouped'):
            lines.append('        "grouped": true,')
        if t.get('measured_on'):
            lines.append(f'        "measured_on": {json.dumps(t["measured_on"])},')
        lines.append(f'        "source": {json.dumps(t["source"], ensure_ascii=False)},')
        lines.append('        "points": [')
        for pi, p in enumerate(t['points']):
            comma = ',' if pi + 1 < len(t['points']) else ''
            lines.append('          ' + json.dumps(p) + comma)
        lines.append('        ]')
        lines.append('      }' + (',' if ti + 1 < len(tables) else ''))
    lines.append('    ],')
    return '\n'.join(lines) + '\n'


def write(cluster, tables, note):
    """`cluster`: a zoo name, or a path from the root (docs/fidelity/clusters/...)."""
    path = os.path.join(ROOT, cluster if '/' in cluster else f'models/clusters/{cluster}.json')
    s = open(path).read()
    block = render(tables)
    start = s.find('    "gemm_tables": [')
    if start >= 0:
        # The existing block ends at its closing bracket, four spaces in (with a comma
        # unless it is the object's last key).
        end = s.index('\n    ]', start) + len('\n    ]')
        if s[end] == ',':
            end += 1
        else:
            block = block.rstrip(',\n') + '\n'
        s = s[:start] + block + s[end + 1:]
    else:
        at = s.index('"compute": {\n') + len('"compute": {\n')
        s = s[:at] + block + s[at:]
    s = re.sub(r'("compute\.gemm_tables": )"(?:[^"\\]|\\.)*"', lambda m: m[1] + json.dumps(note, ensure_ascii=False), s)
    if '"compute.gemm_tables"' not in s:
        at = s.index('"compute.gemm_efficiency"')
        s = s[:at] + '"compute.gemm_tables": ' + json.dumps(note, ensure_ascii=False) + ',\n    ' + s[at:]
    json.loads(s)
    open(path, 'w').write(s)


H200 = {'precision': 'bf16',
        'source': ('Measured by this project on one H200 SXM 141 GB at 700 W (2026-11-25): shardplan '
                   'probe --backend cuda (cuBLAS 13.1 bf16, CUDA 13.0) on the 12 GEMM shapes of a '
                   'Llama 3 8B plan; tests/data/h200/probe.json and its SOURCE.md'),
        'points': points_of(0)}
H200_NOTE = ("Measured here: shardplan probe --backend cuda on one H200 SXM (tests/data/h200/SOURCE.md); "
             "docs/model.md, GEMMs by shape. Grouped: TileOPs PR #1567's H200 rows (torch._grouped_mm and "
             "DeepGEMM BF16, 256 experts of 1024-8192 tokens; the author's H200 ran power-bound near "
             "1.4 GHz, so cautious); written by tools/data/gemm_tables_to_clusters.py.")
H200_GROUPED = {'precision': 'bf16', 'grouped': True, 'source': source_of(35), 'points': points_of(35)}
B200 = [{'precision': 'bf16', 'source': source_of(1), 'points': points_of(1)},
        {'precision': 'bf16', 'grouped': True, 'source': source_of(2), 'points': points_of(2)}]
B200_NOTE = ("SimuMax's B200 tables (Transformer Engine's GEMM and grouped GEMM path through cuBLASLt, "
             "LLM projection shapes, fprop/dgrad/wgrad): what TE delivered on that machine, 0.50 of the "
             "BF16 peak on large shapes where OpenXLA's B200 table (cuBLAS via XLA) reaches 0.63-0.74 "
             "and MAMF's best shape 0.78; a PyTorch stack's torch.mm may run faster than this table "
             "(docs/research/kernels/kernel_rates.md 0.1); written by tools/data/gemm_tables_to_clusters.py.")
# The HGX B200 tables carried to the B200s of NVL72 racks. relative_speed: MAMF's best
# shapes (stas00/ml-engineering compute/accelerator/README.md @744d01e, gemm_points.json
# tables 20-22): GB200 1822 / B200 1745 = 1.044 TFLOP/s; B300 SXM 1769 / 1745 = 1.014 for
# the GB300's Blackwell Ultra (no GB300 row).
B200_GPU = {'gpu': 'B200 SXM (HGX, 148 SMs, 1000 W)', 'peak_flops': 2.25e15, 'sm_count': 148,
            'hbm_bandwidth_bytes_per_s': 7.7e12}


def carried(tables, relative_speed):
    return [dict(t, measured_on=dict(B200_GPU, relative_speed=relative_speed)) for t in tables]


CARRIED_NOTE = ("SimuMax's HGX B200 Transformer Engine tables (see dgx-b200), fitted against that "
                "B200's datasheet and run here {speed} times as fast: MAMF's best shapes, {ratio} "
                "(stas00/ml-engineering compute/accelerator/README.md); not measured on this GPU. "
                "Written by tools/data/gemm_tables_to_clusters.py.")

A100 = [{'precision': 'bf16', 'source': source_of(3), 'points': points_of(3)},
        {'precision': 'bf16', 'grouped': True, 'source': source_of(4), 'points': points_of(4)}]
A100_NOTE = ("SimuMax's A100 80GB tables (its 'a100_pcie' node; whether the GPUs were PCIe or SXM is "
             "not stated, and a PCIe A100 at 300 W runs below an SXM at 400 W: cautious for DGX); "
             "docs/research/kernels/kernel_rates.md; written by tools/data/gemm_tables_to_clusters.py.")

if __name__ == '__main__':
    write('dgx-h200', [H200, H200_GROUPED], H200_NOTE)
    # The fidelity clusters that are a zoo file with another node size keep its tables.
    write('docs/fidelity/clusters/kempner-h200-4gpu.json', [H200, H200_GROUPED], H200_NOTE)
    write('dgx-b200', B200, B200_NOTE)
    write('gb200-nvl72', carried(B200, 1.044),
          CARRIED_NOTE.format(speed=1.044, ratio='GB200 1822 / B200 1745 TFLOP/s'))
    write('docs/fidelity/clusters/gb200-nvl72-64gpu.json', carried(B200, 1.044),
          CARRIED_NOTE.format(speed=1.044, ratio='GB200 1822 / B200 1745 TFLOP/s'))
    write('gb300-nvl72', carried(B200, 1.014),
          CARRIED_NOTE.format(speed=1.014, ratio='B300 SXM 1769 / B200 1745 TFLOP/s (no GB300 row)'))
    write('dgx-a100', A100, A100_NOTE)
    write('dgx-a100-40gb', A100, A100_NOTE)
