"""DTR in steps: a course with graded steps (docs/course/README.md).

Each step is a page and a skeleton in docs/course/, a reference solution in
``minidtr/course/solutions/`` and a grader (``grade_stepN.py``) that runs the
student's code and minidtr's reference policy on the same programs and says in
plain words where they differ. ``python -m minidtr.course check STEP`` grades a step.
"""

from .steps import STEPS, Step, step

__all__ = ["STEPS", "Step", "step"]
