from room.cli import main

raise SystemExit(main())
