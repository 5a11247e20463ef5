"""Exits 0 when two Hugging Face model folders hold the same tensors: the same
names, shapes and values (and dtypes with --same_dtype); prints how many.

usage: same_tensors.py FOLDER_A FOLDER_B [--label TEXT] [--same_dtype]"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_io  # noqa: E402


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("a")
    parser.add_argument("b")
    parser.add_argument("--label", default="folders")
    parser.add_argument("--same_dtype", action="store_true")
    args = parser.parse_args()
    a, b = safetensors_io.read_folder(args.a), safetensors_io.read_folder(args.b)
    if sorted(a) != sorted(b):
        sys.exit("%s: different tensor names: %s" % (args.label, sorted(set(a) ^ set(b))[:10]))
    bad = [n for n in a if not (a[n].shape == b[n].shape and (not args.same_dtype or a[n].dtype == b[n].dtype)
                                and a[n].float().equal(b[n].float()))]
    if bad:
        sys.exit("%s: %d tensors differ, first: %s" % (args.label, len(bad), bad[:5]))
    print("%s: %d tensors identical" % (args.label, len(a)))


if __name__ == "__main__":
    main()
