from kernelwiki.faces.cli import main

raise SystemExit(main())
