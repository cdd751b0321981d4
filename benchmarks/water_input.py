#!/usr/bin/env python3
"""DeePMD-kit's water example input (examples/water/se_e2_a/input.json) for a timed training run:
absolute data paths (data_0..2 for training, data_3 for validation), `steps` steps with display and
checkpoint at the end only, and optionally the precision of both nets and a display (lcurve.out)
frequency other than `steps`.

    water_input.py SOURCE_JSON DATA_DIR STEPS OUTPUT_JSON [PRECISION [DISP_FREQ]]

Used by benchmarks/side_by_side.sh and scripts/gpu_remote_check.sh (DeePMD-kit and dpk-train read
the same file)."""
import json
import sys

if len(sys.argv) not in (5, 6, 7):
    sys.exit(__doc__)
src, data, steps, dst = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
j = json.load(open(src))
if len(sys.argv) >= 6:
    j["model"]["descriptor"]["precision"] = sys.argv[5]
    j["model"]["fitting_net"]["precision"] = sys.argv[5]
t = j["training"]
t["training_data"]["systems"] = [data + "/data_%d" % i for i in range(3)]
if "validation_data" in t:
    t["validation_data"]["systems"] = [data + "/data_3"]
t["numb_steps"] = steps
t["disp_freq"] = int(sys.argv[6]) if len(sys.argv) == 7 else steps
t["save_freq"] = steps
json.dump(j, open(dst, "w"), indent=1)
