"""Exits 0 when two Hugging Face model folders hold the same tensors: the same
names, shapes and values (and dtypes with --same_dtype); prints how many.
With --rtol, values may differ by that much of each tensor's largest
magnitude (two runs that add their sums in another order). A PEFT adapter
folder (adapter_model.safetensors) is read as such.

usage: same_tensors.py FOLDER_A FOLDER_B [--label TEXT] [--same_dtype] [--rtol R]"""
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
    parser.add_argument("--rtol", type=float, default=0.0)
    args = parser.parse_args()
    a, b = read(args.a), read(args.b)
    if sorted(a) != sorted(b):
        sys.exit("%s: different tensor names: %s" % (args.label, sorted(set(a) ^ set(b))[:10]))
    worst = 0.0

    def same(x, y):
        nonlocal worst
        if x.shape != y.shape or (args.same_dtype and x.dtype != y.dtype):
            return False
        x, y = x.float(), y.float()
        if args.rtol == 0:
            return x.equal(y)
        error = float((x - y).abs().max()) / max(float(y.abs().max()), 1e-12) if x.numel() else 0.0
        worst = max(worst, error)
        return error <= args.rtol

    bad = [n for n in a if not same(a[n], b[n])]
    if bad:
        sys.exit("%s: %d tensors differ, first: %s (worst relative error %.2e)" % (args.label, len(bad), bad[:5], worst))
    if args.rtol == 0:
        print("%s: %d tensors identical" % (args.label, len(a)))
    else:
        print("%s: %d tensors equal within %.0e (worst relative error %.2e)" % (args.label, len(a), args.rtol, worst))


def read(folder):
    adapter = os.path.join(folder, "adapter_model.safetensors")
    return safetensors_io.read(adapter) if os.path.exists(adapter) else safetensors_io.read_folder(folder)


if __name__ == "__main__":
    main()
