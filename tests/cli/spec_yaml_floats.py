#!/usr/bin/env python3
"""`baton spec` output read by a YAML 1.1 reader (PyYAML's safe_load): every real field
of the StageSpec (a double or float in schema/*.proto, by its name) must come back as a
float, not a string ('3.5e20', '8e-05' are strings to YAML 1.1) nor an integer, equal to
the number the text holds; and each VALUE given must read back as float(VALUE).

  spec_yaml_floats.py SCHEMA_DIR SPEC_TEXT_FILE [FIELD=VALUE ...]

FIELD=VALUE: the dotted path of a field in the YAML (optimizer.eps) and the number set
for it. Exit 0 when all hold, 1 naming each that does not, 77 without PyYAML."""
import re
import sys

try:
    import yaml
except ImportError:
    print("SKIPPED: PyYAML is not installed")
    sys.exit(77)

FIELD = re.compile(r"^\s*(?:optional\s+|repeated\s+)?([A-Za-z_][\w.]*)\s+(\w+)\s*=\s*\d+\s*[;\[]",
                   re.M)


def real_names(schema_dir):
    """Field names declared double or float, and only so, in the protos a spec uses."""
    types = {}
    for name in ("recipe.proto", "stage_spec.proto", "units.proto"):
        with open(f"{schema_dir}/{name}") as f:
            for t, field in FIELD.findall(f.read()):
                types.setdefault(field, set()).add(t)
    return {n for n, t in types.items() if t <= {"double", "float"}}


def walk(node, path, reals, bad, seen):
    if isinstance(node, dict):
        for k, v in node.items():
            walk(v, path + [str(k)], reals, bad, seen)
    elif isinstance(node, list):
        for i, v in enumerate(node):
            walk(v, path + [str(i)], reals, bad, seen)
    elif path and (path[-1] in reals or (path[-1].isdigit() and len(path) > 1
                                          and path[-2] in reals)):
        seen.append(".".join(path))
        if not isinstance(node, float):
            bad.append(f"{'.'.join(path)}: {node!r} is a {type(node).__name__}, not a float")


def find(node, dotted):
    for k in dotted.split("."):
        node = node[int(k)] if isinstance(node, list) else node[k]
    return node


def main():
    schema_dir, spec_file, pairs = sys.argv[1], sys.argv[2], sys.argv[3:]
    text = open(spec_file).read()
    doc = yaml.safe_load(text)
    bad, seen = [], []
    walk(doc, [], real_names(schema_dir), bad, seen)
    for pair in pairs:
        field, value = pair.split("=", 1)
        got = find(doc, field)
        if not isinstance(got, float) or got != float(value):
            bad.append(f"{field}: given {value}, read back as {got!r}")
    for b in bad:
        print(f"FAIL: {spec_file}: {b}")
    if not seen:
        print(f"FAIL: {spec_file}: no real field found")
        return 1
    print(f"ok   {spec_file}: {len(seen)} real fields read as floats by PyYAML")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
