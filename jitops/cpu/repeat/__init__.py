"""A call's repeats: the memo of remembered launches, the shape classes planned in the
compiled entry, and that entry itself (a CPython fastcall function)."""
