"""Read an Autobahn|Testsuite fuzzing-client report (index.json) and say what it found.

Prints the count of each behaviour for sections 12-13 (permessage-deflate) and for the others,
then every case that is not passed; exits 1 when any case is FAILED or UNIMPLEMENTED or closed
otherwise than OK/INFORMATIONAL (NON-STRICT and INFORMATIONAL are the suite's own passes)."""
import collections
import json
import sys

BAD = {"FAILED", "UNIMPLEMENTED"}
CLOSE_OK = {"OK", "INFORMATIONAL"}


def main(path):
    with open(path) as f:
        index = json.load(f)
    bad = []
    for agent, cases in index.items():
        counts = {"12-13": collections.Counter(), "other": collections.Counter()}
        for case, r in sorted(cases.items(), key=lambda kv: [int(x) for x in kv[0].split(".")]):
            group = "12-13" if case.split(".")[0] in ("12", "13") else "other"
            counts[group][r["behavior"]] += 1
            if r["behavior"] in BAD or r["behaviorClose"] not in CLOSE_OK:
                bad.append((agent, case, r["behavior"], r["behaviorClose"], r.get("reportfile")))
        for group, c in counts.items():
            print(f"{agent} sections {group}: {sum(c.values())} cases, " +
                  ", ".join(f"{k} {v}" for k, v in sorted(c.items())))
    for agent, case, behavior, close, report in bad:
        print(f"{agent} {case}: {behavior} (close {close}) {report}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
