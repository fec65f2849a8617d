"""Input formats, one module per role.

* :mod:`curate.core.formats.containers`: every container curate reads (JSON lines and arrays, Parquet rows,
  tars and WebDataset tars) and :data:`~curate.core.formats.containers.CONTAINERS`, the one table of them;
* :mod:`curate.core.formats.rows`: a row into the canonical record (image columns as the Hugging Face
  ``datasets`` library writes them, img2dataset's Parquet, the conversation of each text layout, where
  images stand in it, the source and id of a row without them);
* :mod:`curate.core.formats.rl_layouts`: RL trainers' row layouts (VLM-R1, verl, LLaVA-OneVision-1.5-RL);
* :mod:`curate.core.formats.listing`: folders and buckets listed into input files;
* :mod:`curate.core.formats.writeback`: records written back keep their images as bytes.

A record's ``images`` hold paths (``str``) or the image bytes themselves (``bytes``); every
stage accepts both (see :mod:`curate.core.images`).
"""
