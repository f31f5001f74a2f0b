"""Distributed TensorFlow trainer for trainstack.

The package is split by concern so each part can be tested on its own:

* ``config``        - command-line flags parsed once into a typed ``TrainerConfig``
* ``jobdir``        - the job directory layout, finished-job marker and metrics file
* ``storage``       - local paths and gs:// URIs: bucket-name checks, a bounded first contact
* ``data``          - tf.data input: synthetic images, image folders, TFRecord files
* ``model``         - the flowers CNN (TensorFlow's image classification tutorial) and ResNet50, compiled for a strategy
* ``strategy``      - choosing and building the tf.distribute strategy from the environment
* ``checkpointing`` - backup/restore, checkpoints, TensorBoard and progress callbacks, export
* ``task``          - the thin entry point, ``python -m trainer.task``

The whole package ships to every node. The loopback cluster launcher for tests and local
runs is a development tool and lives outside it: ``python -m trainstack.localrun.bare_trainers``.

Nothing here imports TensorFlow at package import time, so ``--help`` stays fast.
"""
