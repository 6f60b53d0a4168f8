#!/usr/bin/env bash
# Fails when a GoogleTest test would not run in CI: not registered with CTest at all, or labelled
# `gpu` (which CI leaves out) although it runs without a GPU. Each `gpu` test is run here and must
# report itself skipped; on a machine with CUDA the check of `gpu` tests is left out.
#
#   bash scripts/check-test-labels.sh BUILD_DIR
set -euo pipefail
build=${1:?usage: check-test-labels.sh BUILD_DIR}
listing=$(mktemp)
trap 'rm -f "$listing"' EXIT
ctest --test-dir "$build" --show-only=json-v1 >"$listing"
python3 - "$build" "$listing" <<'PY'
import json, re, subprocess, sys

build, listing = sys.argv[1], json.load(open(sys.argv[2]))
registered = {}   # test name -> its labels
binaries = set()
for test in listing["tests"]:
    labels = next((p["value"] for p in test.get("properties", []) if p["name"] == "LABELS"), [])
    registered[test["name"].split("  # ")[0]] = labels  # without "  # GetParam() = ..."
    command = test.get("command") or []
    if command and command[0].endswith("_test"):
        binaries.add(command[0])

missing = []
for binary in sorted(binaries):
    out = subprocess.run([binary, "--gtest_list_tests"], capture_output=True, text=True,
                         check=True).stdout
    suite = None
    for line in out.splitlines():
        if not line.strip():
            continue
        if not line.startswith(" "):
            suite = line.split()[0]
        else:
            name = suite + line.split()[0]
            if name not in registered:
                missing.append(name)

gpu = sorted(name for name, labels in registered.items() if "gpu" in labels)
if missing:
    sys.exit("check-test-labels: registered with no CTest label, so CI never runs them: "
             + ", ".join(missing))

cuda = subprocess.run(["sh", "-c", "command -v nvidia-smi >/dev/null && nvidia-smi -L"],
                      capture_output=True).returncode == 0
if gpu and not cuda:
    result = subprocess.run(["ctest", "--test-dir", build, "-L", "gpu"], capture_output=True,
                            text=True)
    outcome = dict(re.findall(r"Test\s+#\d+: (\S+) \.+\s*(\S+)", result.stdout))
    ran = [f"{name} ({outcome.get(name, 'not run')})" for name in gpu
           if outcome.get(name) != "***Skipped"]
    if ran:
        sys.exit("check-test-labels: labelled gpu but not skipped without a GPU, so CI never "
                 "runs them: " + ", ".join(ran))
print(f"check-test-labels: ok: {len(registered)} CTest tests from {len(binaries)} binaries; "
      f"{len(gpu)} labelled gpu" + ("" if cuda else ", each skipped without CUDA"))
PY
