from gdv.cli import main

raise SystemExit(main())
