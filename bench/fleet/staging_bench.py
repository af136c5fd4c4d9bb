"""Stage-in benchmark driver (bench/fleet/staging_run.sh): one SeaweedFS S3
server on loopback, one dataset of 64 MiB objects, and side by side in the
same run:

  S3 download  Ferry's staging into an empty node cache (4 objects at a time,
               SHA-256 checked) vs `rclone copy` (4 transfers, MD5 checked)
  cache hits   staging the cached dataset (links only) + reading it from the
               cache vs fio's sequential read of the same bytes on this disk,
               with O_DIRECT (the disk) and through the page cache

Prints a markdown table with ratios; raw lines go to bench/results/."""

import glob
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import s3server

ROUNDS = 3
OBJECT_MB = 64


def fio_read(files, direct):
    out = subprocess.run(
        ["fio", "--name=seq", "--rw=read", "--bs=1M", f"--direct={1 if direct else 0}",
         # Buffered: read what the page cache holds (fio drops it by default).
         f"--invalidate={1 if direct else 0}",
         "--ioengine=psync", "--file_service_type=sequential", "--filename=" + ":".join(files),
         "--output-format=json"], check=True, capture_output=True, text=True).stdout
    job = json.loads(out)["jobs"][0]["read"]
    return job["io_bytes"], job["runtime"] / 1000.0


def main():
    bench, size_mb, results = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    count = max(1, size_mb // OBJECT_MB)
    work = tempfile.mkdtemp(prefix="ferry-staging-bench-", dir=os.environ.get("TMPDIR", "/var/tmp"))
    s3 = s3server.SeaweedS3(work).start()
    lines = []
    try:
        data = os.path.join(work, "data")
        os.makedirs(data)
        objects = []
        for i in range(count):
            blob = os.urandom(OBJECT_MB << 20)
            path = f"part-{i:04d}.bin"
            with open(os.path.join(data, path), "wb") as f:
                f.write(blob)
            objects.append({"path": path, "size": len(blob),
                            "sha256": hashlib.sha256(blob).hexdigest()})
        total = sum(o["size"] for o in objects)
        s3.mkbucket("bench")
        s3.rclone("copy", data, "s3:bench/ds/", "--transfers", "4", timeout=1800)
        manifest = os.path.join(work, "manifest.json")
        with open(manifest, "w") as f:
            json.dump({"source": "s3://bench/ds/", "objects": objects}, f)
        storage = s3.storage_config(os.path.join(work, "storage.yaml"))
        cache = os.path.join(work, "node", "cache")

        def ferry_cold():
            shutil.rmtree(os.path.join(work, "node"), ignore_errors=True)
            out = subprocess.run([bench, "--manifest", manifest, "--cache-dir", cache,
                                  "--storage-config", storage, "--runs", "1", "--cold"],
                                 check=True, capture_output=True, text=True).stdout
            run = json.loads(out.splitlines()[-1])
            assert run["fetched"] == total, run
            return run["seconds"]

        def rclone_copy():
            dest = os.path.join(work, "rclone-dest")
            shutil.rmtree(dest, ignore_errors=True)
            started = time.monotonic()
            s3.rclone("copy", "s3:bench/ds/", dest, "--transfers", "4", timeout=1800)
            return time.monotonic() - started

        ferry_s, rclone_s = [], []
        for _ in range(ROUNDS):  # alternated, so drift hits both alike
            ferry_s.append(ferry_cold())
            rclone_s.append(rclone_copy())
        # The cache now holds the dataset: hits.
        out = subprocess.run([bench, "--manifest", manifest, "--cache-dir", cache, "--storage-config",
                              storage, "--runs", str(ROUNDS), "--read"],
                             check=True, capture_output=True, text=True).stdout
        hits = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
        assert all(h["from_cache"] == total for h in hits), hits
        entries = sorted(glob.glob(os.path.join(cache, "objects", "*", "*")))
        originals = sorted(glob.glob(os.path.join(data, "*.bin")))
        disk = {"origin": [], "cache": []}
        paged = {"origin": [], "cache": []}
        for _ in range(ROUNDS):
            for name, files in (("origin", originals), ("cache", entries)):
                disk[name].append(fio_read(files, True)[1])
                paged[name].append(fio_read(files, False)[1])
        stage_hit = statistics.median(h["seconds"] for h in hits)
        read_hit = statistics.median(h["read_seconds"] for h in hits)

        def gbps(seconds):
            return total / seconds / 1e9

        med = statistics.median
        rows = [
            ("S3 → empty node cache (Ferry, SHA-256)", gbps(med(ferry_s)),
             "rclone copy (4 transfers)", gbps(med(rclone_s)), med(rclone_s) / med(ferry_s)),
            ("cache hit: stage + fio O_DIRECT read of the entries",
             gbps(stage_hit + med(disk["cache"])), "fio O_DIRECT read of the originals",
             gbps(med(disk["origin"])), med(disk["origin"]) / (stage_hit + med(disk["cache"]))),
            ("cache hit: stage + fio buffered read", gbps(stage_hit + med(paged["cache"])),
             "fio buffered read of the originals", gbps(med(paged["origin"])),
             med(paged["origin"]) / (stage_hit + med(paged["cache"]))),
            ("cache hit: stage + read through the staged tree (1 MiB reads)",
             gbps(stage_hit + read_hit), "fio buffered read of the originals",
             gbps(med(paged["origin"])), med(paged["origin"]) / (stage_hit + read_hit)),
        ]
        print(f"\ndataset: {count} objects x {OBJECT_MB} MiB = {total / 2**20:.0f} MiB, "
              f"{ROUNDS} rounds, medians; staging a cached dataset (links only) took "
              f"{stage_hit * 1000:.1f} ms\n")
        print("| Ferry | GB/s | reference | GB/s | Ferry / reference |")
        print("|---|---:|---|---:|---:|")
        for ours, a, ref, b, ratio in rows:
            print(f"| {ours} | {a:.2f} | {ref} | {b:.2f} | {ratio:.2f}x |")
        lines = {"ferry_s": ferry_s, "rclone_s": rclone_s, "hits": hits, "disk": disk,
                 "paged": paged, "bytes": total}
        with open(os.path.join(results, "staging.json"), "w") as f:
            json.dump(lines, f, indent=1)
    finally:
        s3.stop(grace=2)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
