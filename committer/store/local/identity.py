"""What identifies a local file: an etag made from what a rename keeps.

Local files have no etag, so one is made from what a rename keeps: inode, modification time and
size. It proves that a destination *is* the renamed source (HADOOP-18012 recovery) and lets
output validation notice a replaced file.
"""

from __future__ import annotations

import os


def file_etag(st: os.stat_result) -> str:
    return f"{st.st_ino:x}-{st.st_mtime_ns:x}-{st.st_size:x}"
