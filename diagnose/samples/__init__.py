"""The samples as recorded, shared by every stage that reads them: the profile (frames, distinct
stacks, per-thread tracks), the source lines its frames name, and the native libraries its
frames and a process's mappings are recognised by. Imports nothing of diagnose."""
