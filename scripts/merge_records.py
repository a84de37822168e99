#!/usr/bin/env python3
"""Merges the flashattn-bench JSON files of one A/B script run into one JSON.

Usage: merge_records.py DIR OUT COMMAND. Files in DIR are named NNN_LABEL.json (NNN the run's
order); every record gains "label" (LABEL), the merged file keeps the first file's header with
"command" set to COMMAND. Prints the record count. Used by scripts/softcap_cost.sh and
scripts/paged_cost.sh.
"""
import json
import os
import sys


def merge(tmp, command):
    merged = None
    for f in sorted(os.listdir(tmp)):
        r = json.load(open(os.path.join(tmp, f)))
        for rec in r["records"]:
            rec["label"] = f[4:-5]
        if merged is None:
            merged = r
        else:
            merged["records"] += r["records"]
    merged["command"] = command
    return merged


if __name__ == "__main__":
    tmp, out, command = sys.argv[1:4]
    merged = merge(tmp, command)
    json.dump(merged, open(out, "w"), indent=1)
    print("records", len(merged["records"]))
