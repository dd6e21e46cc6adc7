"""Files: write and read (streamed, any size), list, watch a directory, and
whole directories in and out as tar."""

import os
import tempfile

from airlock import Sandbox

with Sandbox.create() as sandbox, tempfile.TemporaryDirectory() as local:
    files = sandbox.files
    files.write("/root/project/data.csv", "name,score\nada,3\nalan,2\n")
    print(files.read("/root/project/data.csv"), end="")

    # Directory changes, seen by a watch.
    watch = files.watch_dir("/root/project", recursive=True)
    sandbox.commands.run(
        "python3 -c \"import csv; rows = list(csv.DictReader(open('/root/project/data.csv')));"
        " open('/root/project/total.txt', 'w').write(str(sum(int(r['score']) for r in rows)))\""
    )
    for event in watch.get_new_events():
        print("event:", event.type.value, event.name)
    watch.stop()

    for entry in files.list("/root/project"):
        print(f"{entry.permissions} {entry.size:6} {entry.name}")
    print("total:", files.read("/root/project/total.txt"))

    # A large file goes in chunks, never held whole.
    with open(os.path.join(local, "blob"), "wb") as blob:
        blob.write(os.urandom(8 * 1024 * 1024))
    with open(os.path.join(local, "blob"), "rb") as blob:
        info = files.write("/tmp/blob", blob)
    print("uploaded", info.size, "bytes;", sandbox.commands.run("sha256sum /tmp/blob").stdout.split()[0])

    # Whole trees, as tar streams (modes and symlinks kept).
    files.download_dir("/root/project", os.path.join(local, "project"))
    print("downloaded:", sorted(os.listdir(os.path.join(local, "project"))))
