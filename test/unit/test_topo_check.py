#!/usr/bin/env python3
"""Checks fccl-topo's machine-readable outputs, with the Python standard library only.

  --json: validated against test/data/topo/schema.json by a small JSON Schema validator (the subset of draft 2020-12
          the schema uses; an unsupported keyword in the schema is an error, so the schema cannot silently mean less).
  --xml:  checked against what NCCL's topology XML reader (src/graph/xml.cc) accepts: no prolog or comments,
          attributes separated by single spaces, "/>" right after the last attribute, and the attributes NCCL's
          topology builder (src/graph/topo.cc) reads without a default on each element.

  test_topo_check.py --schema schema.json --goldens test/data/topo   the *.json.golden and *.xml.golden files
  test_topo_check.py --schema schema.json --run build/tools/fccl-topo   the program on this machine, live

Before checking anything the validators are shown documents they must reject; a validator that accepts everything
fails the test.
"""
import argparse
import copy
import glob
import json
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET

# ---- JSON Schema (subset) ---------------------------------------------------------------------------------------

ANNOTATIONS = {"$schema", "$id", "title", "description", "$defs"}
KEYWORDS = {"type", "properties", "required", "additionalProperties", "items", "enum", "const", "pattern", "minimum",
            "maximum", "minItems", "oneOf", "$ref"} | ANNOTATIONS
TYPES = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
}


class SchemaError(Exception):
    pass


def resolve(root, ref):
    if not ref.startswith("#/"):
        raise SchemaError("only local $ref are supported: %s" % ref)
    node = root
    for part in ref[2:].split("/"):
        if part not in node:
            raise SchemaError("unresolved $ref %s" % ref)
        node = node[part]
    return node


def validate(instance, schema, root, path="$"):
    """Returns a list of error strings (empty: valid)."""
    if not isinstance(schema, dict):
        raise SchemaError("%s: a schema must be an object" % path)
    unknown = set(schema) - KEYWORDS
    if unknown:
        raise SchemaError("unsupported schema keywords %s" % sorted(unknown))
    errors = []
    if "$ref" in schema:
        errors += validate(instance, resolve(root, schema["$ref"]), root, path)
    if "type" in schema:
        types = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
        if not any(TYPES[t](instance) for t in types):
            return errors + ["%s: %r is not of type %s" % (path, instance, "/".join(types))]
    if "const" in schema and instance != schema["const"]:
        errors.append("%s: %r is not %r" % (path, instance, schema["const"]))
    if "enum" in schema and instance not in schema["enum"]:
        errors.append("%s: %r is not one of %s" % (path, instance, schema["enum"]))
    if "oneOf" in schema:
        matches = sum(1 for sub in schema["oneOf"] if not validate(instance, sub, root, path))
        if matches != 1:
            errors.append("%s: %r matches %d of the oneOf alternatives, not exactly one" % (path, instance, matches))
    if isinstance(instance, str) and "pattern" in schema and not re.search(schema["pattern"], instance):
        errors.append("%s: %r does not match %s" % (path, instance, schema["pattern"]))
    if TYPES["number"](instance):
        if "minimum" in schema and instance < schema["minimum"]:
            errors.append("%s: %r is below %r" % (path, instance, schema["minimum"]))
        if "maximum" in schema and instance > schema["maximum"]:
            errors.append("%s: %r is above %r" % (path, instance, schema["maximum"]))
    if isinstance(instance, list):
        if "minItems" in schema and len(instance) < schema["minItems"]:
            errors.append("%s: fewer than %d items" % (path, schema["minItems"]))
        if "items" in schema:
            for i, item in enumerate(instance):
                errors += validate(item, schema["items"], root, "%s[%d]" % (path, i))
    if isinstance(instance, dict):
        properties = schema.get("properties", {})
        for key in schema.get("required", []):
            if key not in instance:
                errors.append("%s: missing required member %r" % (path, key))
        for key, value in instance.items():
            if key in properties:
                errors += validate(value, properties[key], root, "%s.%s" % (path, key))
            elif schema.get("additionalProperties", True) is False:
                errors.append("%s: unexpected member %r" % (path, key))
            elif isinstance(schema.get("additionalProperties"), dict):
                errors += validate(value, schema["additionalProperties"], root, "%s.%s" % (path, key))
    return errors


def check_json(text, schema, what):
    try:
        document = json.loads(text)
    except ValueError as e:
        return ["%s: not JSON: %s" % (what, e)]
    errors = validate(document, schema, schema)
    if isinstance(document, dict):
        errors += consistency(document)
    return ["%s: %s" % (what, e) for e in errors]


def consistency(doc):
    """What a schema cannot say: the matrix is square and matches the GPUs, peers cover every ordered pair."""
    errors = []
    n = len(doc.get("gpus", []))
    rows = doc.get("matrix", {}).get("rows", [])
    if len(rows) != n or any(len(r) != n for r in rows):
        errors.append("matrix is not %dx%d" % (n, n))
    for i, row in enumerate(rows):
        if i < len(row) and row[i] != "X":
            errors.append("matrix[%d][%d] is %r, not X" % (i, i, row[i]))
    pairs = {(p.get("from"), p.get("to")) for p in doc.get("peers", [])}
    expected = {(i, j) for i in range(n) for j in range(n) if i != j}
    if pairs != expected:
        errors.append("peers do not cover every ordered GPU pair exactly once")
    if n == 0 and not any("no GPU found" in note for note in doc.get("notes", [])):
        errors.append("no GPU, but no note says 'no GPU found'")
    for g, gpu in enumerate(doc.get("gpus", [])):
        if gpu.get("index") != g:
            errors.append("gpus[%d].index is %r" % (g, gpu.get("index")))
    return errors


def json_self_test(schema, sample):
    """The validator must reject broken variants of a valid document."""
    doc = json.loads(sample)
    breakages = [
        ("schema version", lambda d: d.__setitem__("schema", "fccl-topo/2")),
        ("missing member", lambda d: d.pop("notes")),
        ("unknown member", lambda d: d.__setitem__("extra", 1)),
        ("wrong type", lambda d: d["host"].__setitem__("pus", "many")),
        ("bool for int", lambda d: d["host"].__setitem__("cores", True)),
        ("bad enum", lambda d: d["source"].__setitem__("host", "elsewhere")),
        ("bad pattern", lambda d: d["host"]["numa_nodes"][0].__setitem__("cpus", "0-1;2")),
        ("below minimum", lambda d: d["host"].__setitem__("pus", -1)),
        ("nested unknown", lambda d: d["host"]["pci"][0].__setitem__("colour", "red")),
        ("matrix shape", lambda d: d["matrix"]["rows"].append(["X"])),
    ]
    failures = []
    for name, breaker in breakages:
        broken = copy.deepcopy(doc)
        breaker(broken)
        if not check_json(json.dumps(broken), schema, name):
            failures.append("the JSON validator accepted a document with a %s" % name)
    return failures


# ---- NCCL topology XML ------------------------------------------------------------------------------------------

TAG = re.compile(r'^ *<(/?)([a-z]+)((?: [a-z_]+="[^"]*")*)(/?)>$')
ATTR = re.compile(r' ([a-z_]+)="([^"]*)"')
BUSID = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")
HEXCLASS = re.compile(r"^0x[0-9a-f]{6}$")
HEX16 = re.compile(r"^0x[0-9a-f]{4}$")
INT = re.compile(r"^-?[0-9]+$")
CPUMAP = re.compile(r"^[0-9a-f]{8}(,[0-9a-f]{8})*$")
SPEEDS = {"", "2.5 GT/s PCIe", "5.0 GT/s PCIe", "8.0 GT/s PCIe", "16.0 GT/s PCIe", "32.0 GT/s PCIe", "64.0 GT/s PCIe"}
CHILDREN = {"system": {"cpu"}, "cpu": {"pci", "nic"}, "pci": {"pci", "gpu", "nic"}, "gpu": {"nvlink"},
            "nic": {"net"}, "nvlink": set(), "net": set()}
MAX_STR_LEN = 255   # NCCL's limit for names and values
MAX_ATTR_COUNT = 16


def check_element(tag, attrs):
    """The attributes NCCL reads with xmlGetAttrStr/xmlGetAttrInt (no default) must be present and well formed."""
    errors = []

    def need(name, pattern=None, allowed=None):
        if name not in attrs:
            errors.append("<%s> lacks %s" % (tag, name))
        elif pattern is not None and not pattern.match(attrs[name]):
            errors.append("<%s %s=%r> is malformed" % (tag, name, attrs[name]))
        elif allowed is not None and attrs[name] not in allowed:
            errors.append("<%s %s=%r> is not one of %s" % (tag, name, attrs[name], sorted(allowed)))

    if tag == "system":
        need("version", allowed={"1"})
    elif tag == "cpu":
        need("numaid", INT)
        need("arch", allowed={"x86_64", "arm64", "ppc64"})
        if "affinity" in attrs and not CPUMAP.match(attrs["affinity"]):
            errors.append("<cpu affinity=%r> is not a sysfs cpumap" % attrs["affinity"])
        for name in ("familyid", "modelid"):
            if name in attrs and not INT.match(attrs[name]):
                errors.append("<cpu %s=%r> is not a number" % (name, attrs[name]))
    elif tag == "pci":
        need("busid", BUSID)
        need("class", HEXCLASS)
        need("link_speed", allowed=SPEEDS)
        need("link_width", re.compile(r"^([0-9]+)?$"))
        for name in ("vendor", "device", "subsystem_vendor", "subsystem_device"):
            if name in attrs and not HEX16.match(attrs[name]):
                errors.append("<pci %s=%r> is malformed" % (name, attrs[name]))
    elif tag == "gpu":
        for name in ("dev", "sm", "rank", "gdr"):
            need(name, INT)
    elif tag == "nvlink":
        need("target", re.compile(r"^([0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]|fffffff:ffff:ff)$"))
        need("count", re.compile(r"^[1-9][0-9]*$"))
        need("tclass", re.compile(r"^0x(068000|068001|03[0-9a-f]{4})$"))
    return errors


def check_nccl_xml(text, what):
    errors = []
    if not text.startswith("<system "):
        errors.append("does not start with <system (NCCL's reader takes no prolog)")
    stack = []
    seen_system = False
    for number, line in enumerate(text.splitlines(), 1):
        m = TAG.match(line)
        if not m:
            errors.append("line %d: not one tag in NCCL's strict form: %r" % (number, line))
            continue
        closing, tag, attr_text, self_closing = m.groups()
        if tag not in CHILDREN:
            errors.append("line %d: unknown element <%s>" % (number, tag))
            continue
        if closing:
            if not stack or stack[-1] != tag:
                errors.append("line %d: </%s> closes %s" % (number, tag, stack[-1] if stack else "nothing"))
            else:
                stack.pop()
            continue
        attrs = dict(ATTR.findall(attr_text))
        if len(ATTR.findall(attr_text)) != len(attrs):
            errors.append("line %d: an attribute appears twice" % number)
        if len(attrs) > MAX_ATTR_COUNT:
            errors.append("line %d: more than %d attributes" % (number, MAX_ATTR_COUNT))
        if any(len(v) > MAX_STR_LEN for v in attrs.values()):
            errors.append("line %d: a value longer than %d characters" % (number, MAX_STR_LEN))
        if stack and tag not in CHILDREN[stack[-1]]:
            errors.append("line %d: <%s> inside <%s>" % (number, tag, stack[-1]))
        if not stack:
            if tag != "system" or seen_system:
                errors.append("line %d: <%s> at the top level" % (number, tag))
            seen_system = True
        errors += ["line %d: %s" % (number, e) for e in check_element(tag, attrs)]
        if not self_closing:
            stack.append(tag)
    if stack:
        errors.append("unclosed <%s>" % "><".join(stack))
    try:
        ET.fromstring(text)
    except ET.ParseError as e:
        errors.append("not well-formed XML: %s" % e)
    return ["%s: %s" % (what, e) for e in errors]


def xml_self_test():
    good = ('<system version="1">\n  <cpu numaid="0" arch="x86_64">\n'
            '    <pci busid="0000:18:00.0" class="0x030200" link_speed="" link_width="">\n'
            '      <gpu dev="0" sm="90" rank="0" gdr="1">\n'
            '        <nvlink target="fffffff:ffff:ff" count="18" tclass="0x068000"/>\n'
            '      </gpu>\n    </pci>\n  </cpu>\n</system>\n')
    failures = []
    if check_nccl_xml(good, "good"):
        failures.append("the NCCL XML check rejects a valid document: %s" % check_nccl_xml(good, "good"))
    broken = [
        ("a prolog", '<?xml version="1.0"?>\n' + good),
        ("a space before />", good.replace('tclass="0x068000"/>', 'tclass="0x068000" />')),
        ("a missing link_width", good.replace(' link_width=""', "")),
        ("a missing gdr", good.replace(' gdr="1"', "")),
        ("a bad bus id", good.replace("0000:18:00.0", "0000:18:00")),
        ("a gpu outside pci", good.replace("<pci busid", "<nic busid").replace("</pci>", "</nic>")),
        ("an unclosed element", good.replace("</system>\n", "")),
        ("two attributes on one space", good.replace('dev="0" sm', 'dev="0"  sm')),
    ]
    for name, text in broken:
        if not check_nccl_xml(text, name):
            failures.append("the NCCL XML check accepted a document with %s" % name)
    return failures


# ---- driver ---------------------------------------------------------------------------------------------------------

def run(argv):
    result = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=100)
    return result.returncode, result.stdout.decode("utf-8", "replace"), result.stderr.decode("utf-8", "replace")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--schema", required=True)
    parser.add_argument("--goldens", help="directory holding *.json.golden and *.xml.golden")
    parser.add_argument("--run", help="fccl-topo to run on this machine")
    args = parser.parse_args()
    with open(args.schema) as f:
        schema = json.load(f)
    failures = []
    checked = 0
    samples = []
    if args.goldens:
        json_files = sorted(glob.glob(os.path.join(args.goldens, "*.json.golden")))
        xml_files = sorted(glob.glob(os.path.join(args.goldens, "*.xml.golden")))
        if not json_files or not xml_files:
            failures.append("no golden files under %s" % args.goldens)
        for path in json_files:
            with open(path) as f:
                text = f.read()
            samples.append(text)
            failures += check_json(text, schema, os.path.basename(path))
            checked += 1
        for path in xml_files:
            with open(path) as f:
                failures += check_nccl_xml(f.read(), os.path.basename(path))
            checked += 1
    if args.run:
        code, out, err = run([args.run, "--json"])
        if code != 0:
            failures.append("fccl-topo --json exited %d: %s" % (code, err.strip()))
        else:
            samples.append(out)
            failures += check_json(out, schema, "fccl-topo --json")
        checked += 1
        code, out, err = run([args.run, "--xml"])
        if code != 0:
            failures.append("fccl-topo --xml exited %d: %s" % (code, err.strip()))
        else:
            failures += check_nccl_xml(out, "fccl-topo --xml")
        checked += 1
        code, out, err = run([args.run])
        if code != 0 or not out.startswith("fccl-topo: ") or "\nfccl\n" not in out:
            failures.append("fccl-topo exited %d or its report is incomplete: %s" % (code, err.strip()))
        checked += 1
        code, out, err = run([args.run, "--frobnicate"])
        if code != 2 or "unknown option" not in err:
            failures.append("fccl-topo --frobnicate exited %d (expected 2 with a message)" % code)
        checked += 1
    # The validators themselves, on documents they must reject.
    with_pci = [s for s in samples if json.loads(s)["host"]["pci"]]
    if not with_pci:
        failures.append("no JSON sample with a PCI tree to test the validator on")
    else:
        failures += json_self_test(schema, with_pci[0])
    failures += xml_self_test()
    for failure in failures:
        print("FAIL " + failure)
    print("topo_check: %d outputs checked, %d failures" % (checked, len(failures)))
    return 1 if failures or checked == 0 else 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except SchemaError as e:
        print("FAIL schema: %s" % e)
        sys.exit(1)
