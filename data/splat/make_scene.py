#!/usr/bin/env python3
"""Writes the example Gaussian scene of data/splat (standard library only, deterministic):

    python3 data/splat/make_scene.py [OUT_DIR]      (default: this folder)

scene.ply   400 Gaussians, SH degree 1, in the standard 3DGS PLY layout (binary_little_endian
            float32: x y z nx ny nz f_dc_0..2 f_rest_0..8 opacity scale_0..2 rot_0..3, f_rest
            channel-major, opacity a logit, scales natural logs, rot a quaternion w x y z):
            a sphere of 240 round Gaussians around the origin, coloured by direction, over a
            checkered floor of 160 flat Gaussians at y = 1.1 (y points down, as in OpenCV).
camera.json one 160 x 120 pinhole camera at (1.2, -1.4, -3.6) looking at the origin.
ring.json   four 64 x 48 cameras on a ring around the scene, each naming its picture
            (view0.png ... view3.png) for `rlx splat fit` (docs/splat.md shows the run).

This writer is independent of rlx's (src/io/ply.cpp), so the CLI test that renders these
files also checks that rlx reads a file it did not write.
"""
import json
import math
import os
import random
import struct
import sys

SH_C0 = 0.28209479177387814  # degree-0 basis constant: colour = SH_C0 * f_dc + 0.5


def normalize(v):
    n = math.sqrt(sum(x * x for x in v))
    return [x / n for x in v]


def cross(a, b):
    return [a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2], a[0] * b[1] - a[1] * b[0]]


def random_quaternion(rng):
    q = normalize([rng.uniform(-1, 1) for _ in range(4)])
    return q if q[0] >= 0 else [-x for x in q]


def gaussians(rng):
    out = []
    # The sphere: a Fibonacci lattice of 240 points, colour from the direction.
    n = 240
    for i in range(n):
        y = 1 - 2 * (i + 0.5) / n
        r = math.sqrt(1 - y * y)
        phi = i * math.pi * (3 - math.sqrt(5))
        d = [r * math.cos(phi), y, r * math.sin(phi)]
        colour = [0.5 + 0.45 * d[0], 0.5 - 0.45 * d[1], 0.5 + 0.45 * d[2]]
        rest = [rng.uniform(-0.08, 0.08) for _ in range(9)]  # a little view dependence
        out.append((d, [math.log(0.13)] * 3, random_quaternion(rng), 2.5, colour, rest))
    # The floor: 16 x 10 flat Gaussians in a checkerboard of two greys.
    for ix in range(16):
        for iz in range(10):
            m = [-2.25 + 0.3 * ix, 1.1, -1.0 + 0.3 * iz]
            g = 0.8 if (ix + iz) % 2 == 0 else 0.3
            out.append((m, [math.log(0.17), math.log(0.01), math.log(0.17)], [1.0, 0.0, 0.0, 0.0], 3.0,
                        [g, g, g], [0.0] * 9))
    return out


def write_ply(path, gs):
    names = ["x", "y", "z", "nx", "ny", "nz", "f_dc_0", "f_dc_1", "f_dc_2"]
    names += ["f_rest_%d" % i for i in range(9)]
    names += ["opacity", "scale_0", "scale_1", "scale_2", "rot_0", "rot_1", "rot_2", "rot_3"]
    header = "ply\nformat binary_little_endian 1.0\nelement vertex %d\n" % len(gs)
    header += "".join("property float %s\n" % n for n in names) + "end_header\n"
    with open(path, "wb") as f:
        f.write(header.encode("ascii"))
        for mean, log_scale, quat, opacity_logit, colour, rest in gs:
            dc = [(c - 0.5) / SH_C0 for c in colour]
            # rest is [k][c] (3 coefficients of degree 1 per channel); the file stores all of
            # red's, then green's, then blue's.
            channel_major = [rest[3 * k + c] for c in range(3) for k in range(3)]
            values = mean + [0.0, 0.0, 0.0] + dc + channel_major + [opacity_logit] + log_scale + quat
            f.write(struct.pack("<%df" % len(values), *values))


def look_at(eye, target, down=(0.0, 1.0, 0.0)):
    """World-to-camera [R | t] with OpenCV axes: z towards the target, y as close to `down`."""
    z = normalize([t - e for t, e in zip(target, eye)])
    dz = sum(a * b for a, b in zip(down, z))
    y = normalize([a - dz * b for a, b in zip(down, z)])
    x = cross(y, z)
    rows = [x, y, z]
    t = [-sum(r[i] * eye[i] for i in range(3)) for r in rows]
    return [rows[0] + [t[0]], rows[1] + [t[1]], rows[2] + [t[2]], [0.0, 0.0, 0.0, 1.0]]


def camera_text(camera, indent=""):
    """One line per field and per matrix row (json.dumps prints each number exactly)."""
    fields = ['%s  "%s": %s' % (indent, k, json.dumps(v)) for k, v in camera.items() if k != "world_to_camera"]
    rows = ",\n".join(indent + "    " + json.dumps(r) for r in camera["world_to_camera"])
    fields.append('%s  "world_to_camera": [\n%s\n%s  ]' % (indent, rows, indent))
    return indent + "{\n" + ",\n".join(fields) + "\n" + indent + "}"


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
    rng = random.Random(17)
    write_ply(os.path.join(out, "scene.ply"), gaussians(rng))
    camera = {"width": 160, "height": 120, "fx": 150.0, "fy": 150.0, "cx": 80.0, "cy": 60.0,
              "world_to_camera": look_at([1.2, -1.4, -3.6], [0.0, 0.2, 0.0])}
    with open(os.path.join(out, "camera.json"), "w") as f:
        f.write(camera_text(camera) + "\n")
    ring = []
    for i in range(4):
        a = 2 * math.pi * i / 4 + 0.3
        eye = [3.8 * math.sin(a), -1.2, -3.8 * math.cos(a)]
        ring.append({"width": 64, "height": 48, "fx": 60.0, "fy": 60.0, "cx": 32.0, "cy": 24.0,
                     "world_to_camera": look_at(eye, [0.0, 0.2, 0.0]), "image": "view%d.png" % i})
    with open(os.path.join(out, "ring.json"), "w") as f:
        f.write("[\n" + ",\n".join(camera_text(c, "  ") for c in ring) + "\n]\n")


if __name__ == "__main__":
    main()
