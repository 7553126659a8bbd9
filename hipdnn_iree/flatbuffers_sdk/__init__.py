"""FlatBuffer code that more than one layer reads (hipDNN's flatbuffers SDK): the Python code
``flatc`` generates from ``schemas/*.fbs`` (committed, regenerated under test) and ``verify``, the
bounds checks run on untrusted bytes before any generated accessor touches them. Imports nothing
of the project.
"""
